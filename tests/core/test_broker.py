"""The embedded broker writes each message file whole before a consumer can see it."""

from kombu import Connection

from areal_web.broker import AtomicFilesystemTransport


def _connection(folder):
    return Connection(
        transport=AtomicFilesystemTransport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "store_processed": False,
            "control_folder": str(folder / "control"),
        },
    )


def test_messages_arrive_whole_and_half_written_files_are_not_taken(tmp_path):
    (tmp_path / "control").mkdir()
    with _connection(tmp_path) as connection:
        queue = connection.SimpleQueue("jobs")
        (tmp_path / "1_half.jobs.msg.part").write_bytes(b"")  # a message still being written
        queue.put({"n": 1})
        assert sorted(path.name.endswith(".msg") for path in tmp_path.glob("*_*.jobs.msg*")) == [False, True]
        message = queue.get(timeout=2)
        assert message.payload == {"n": 1}
        message.ack()
        assert (tmp_path / "1_half.jobs.msg.part").exists()  # left alone: not a message yet
        queue.close()


def test_no_message_file_is_visible_while_it_is_being_written(tmp_path, monkeypatch):
    import areal_web.broker as broker

    (tmp_path / "control").mkdir()
    seen = []
    real_dumps = broker.dumps

    def dumps_and_look(payload):  # runs in the middle of _put, as a polling consumer would
        seen.append(sorted(path.name for path in tmp_path.glob("*.msg")))
        return real_dumps(payload)

    monkeypatch.setattr(broker, "dumps", dumps_and_look)
    with _connection(tmp_path) as connection:
        queue = connection.SimpleQueue("writes")
        queue.put({"n": 2})
        assert seen == [[]]  # kombu's own _put has already created the (empty) .msg file at this point
        assert queue.get(timeout=2).payload == {"n": 2}
        queue.close()
