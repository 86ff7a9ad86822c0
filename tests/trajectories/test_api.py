"""The trajectories REST API (ATDP v1 as a product surface): list with filters and cursor pagination,
detail, JSON Lines and Parquet export, JSON Lines import. Reads plant a second tenant's rows and assert they
stay invisible; writes assert the second tenant is untouched."""

import io
import json
import uuid

import pyarrow.parquet as pq
import pytest

from apps.rewards.models import Reward
from apps.tenants.permissions import Role
from apps.trajectories.models import Step, Trajectory
from tests.trajectories.builders import atdp_record, gateway_step, imported, ingested
from workers.atdp import read_parquet, validate_trajectory

pytestmark = pytest.mark.django_db

LIST = "/api/v1/trajectories/"
EXPORT = "/api/v1/trajectories/export/"
IMPORT = "/api/v1/trajectories/import/"
LIST_QUERIES = 8  # with the reviews and verdicts an ATDP record's governance reports


def _ids(records) -> set[str]:
    return {record["trajectory_id"] for record in records}


def _jsonl(*records) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.fixture
def reader(api_client):
    return api_client(["trajectories:read"])


@pytest.fixture
def writer(api_client):
    return api_client(["trajectories:write"])


@pytest.fixture
def catalogue(tenant, other_tenant):
    """Four of this tenant's trajectories that differ in every filtered field, and a second tenant's
    trajectory that matches every filter trajectory `a` matches."""
    rows = {
        "a": imported(
            tenant,
            "s-a",
            agent={"name": "weather-agent", "version": "1"},
            task_id="t-1",
            group_id="g-1",
            status="complete",
            purpose="production",
            started_at="2025-03-01T10:00:00Z",
            ended_at="2025-03-01T10:05:00Z",
            rewards=[0.9],
        ),
        "b": imported(
            tenant,
            "s-b",
            agent={"name": "coder", "version": "1"},
            task_id="t-2",
            group_id="g-1",
            status="aborted",
            purpose="eval",
            started_at="2025-03-02T10:00:00Z",
            ended_at="2025-03-02T10:05:00Z",
            rewards=[0.2, 0.6],
        ),
        "c": imported(
            tenant,
            "s-c",
            agent={"name": "coder", "version": "2"},
            task_id="t-1",
            group_id="g-2",
            status="open",
            purpose="replay",
            started_at="2025-03-03T10:00:00Z",
            rewards=[],
        ),
        "d": imported(
            tenant,
            "s-d",
            agent={"name": "planner", "version": "1"},
            task_id=None,
            group_id=None,
            status="open",
            purpose="annotation",
            started_at="2025-03-04T10:00:00Z",
            rewards=[-1.0],
        ),
    }
    foreign = imported(
        other_tenant,
        "s-a",
        agent={"name": "weather-agent", "version": "1"},
        task_id="t-1",
        group_id="g-1",
        status="complete",
        purpose="production",
        started_at="2025-03-01T10:00:00Z",
        ended_at="2025-03-01T10:05:00Z",
        rewards=[0.9],
    )
    return {name: str(row.id) for name, row in rows.items()}, str(foreign.id)


# --------------------------------------------------------------------------------------------------- list


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, "abcd"),
        ({"session_id": "s-a"}, "a"),
        ({"agent": "coder"}, "bc"),
        ({"task_id": "t-1"}, "ac"),
        ({"group_id": "g-1"}, "ab"),
        ({"status": "aborted"}, "b"),
        ({"status": "open"}, "cd"),
        ({"purpose": "eval"}, "b"),
        ({"purpose": "annotation"}, "d"),
        ({"reward_min": "0.5"}, "ab"),
        ({"reward_max": "0.5"}, "bd"),
        ({"reward_min": "0.1", "reward_max": "0.3"}, "b"),
        ({"reward_min": "0.95"}, ""),
        ({"started_after": "2025-03-02T10:00:00Z"}, "bcd"),
        ({"started_before": "2025-03-02T10:00:00Z"}, "a"),
        ({"started_after": "2025-03-02T00:00:00Z", "started_before": "2025-03-03T12:00:00Z"}, "bc"),
        ({"agent": "coder", "status": "open", "task_id": "t-1"}, "c"),
    ],
)
def test_each_filter_selects_its_rows(reader, catalogue, query, expected):
    ids, foreign = catalogue
    response = reader.get(LIST, query)
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert _ids(results) == {ids[name] for name in expected}
    assert foreign not in _ids(results)
    assert all(record["tenant"] == "acme" for record in results)
    started = [record["started_at"] for record in results]
    assert started == sorted(started, reverse=True)  # newest first


def test_list_results_are_atdp(reader, catalogue):
    results = reader.get(LIST).json()["results"]
    assert len(results) == 4
    for record in results:
        assert validate_trajectory(record) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"status": "finished"}, "status"),
        ({"purpose": "training"}, "purpose"),
        ({"reward_min": "high"}, "reward_min"),
        ({"reward_max": "1e"}, "reward_max"),
        ({"started_after": "yesterday"}, "started_after"),
        ({"started_before": "2025-13-01"}, "started_before"),
        ({"session_id": "x" * 201}, "session_id"),
    ],
)
def test_an_invalid_filter_value_is_a_400_naming_the_field(reader, catalogue, query, field):
    for url in (LIST, EXPORT):
        response = reader.get(url, query)
        assert response.status_code == 400, (url, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert list(error["fields"]) == [field]


def test_cursor_pagination_walks_every_row_once(reader, tenant, other_tenant):
    # Ties on started_at (the cursor's position field) are the hard case for a cursor.
    moments = ["2025-05-01T08:00:00Z"] * 4 + ["2025-05-02T08:00:00Z"] * 3 + ["2025-05-03T08:00:00Z"]
    expected = {
        str(imported(tenant, f"page-{number}", started_at=moment, rewards=[]).id)
        for number, moment in enumerate(moments)
    }
    for number in range(3):
        imported(other_tenant, f"page-{number}", started_at=moments[0], rewards=[])

    seen, pages, url = [], 0, f"{LIST}?page_size=3"
    while url:
        response = reader.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        assert len(body["results"]) <= 3
        seen.extend(record["trajectory_id"] for record in body["results"])
        started = [record["started_at"] for record in body["results"]]
        assert started == sorted(started, reverse=True)
        url, pages = body["next"], pages + 1
        assert pages <= 3, "the cursor does not advance"
    assert pages == 3
    assert len(seen) == len(set(seen)) == 8
    assert set(seen) == expected


def test_a_cursor_keeps_the_filter(reader, tenant, other_tenant):
    for number in range(5):
        imported(tenant, f"eval-{number}", purpose="eval", rewards=[])
        imported(other_tenant, f"eval-{number}", purpose="eval", rewards=[])
    imported(tenant, "prod-0", purpose="production", rewards=[])
    first = reader.get(LIST, {"purpose": "eval", "page_size": 2}).json()
    seen = [(record["tenant"], record["purpose"]) for record in first["results"]]
    url = first["next"]
    while url:
        page = reader.get(url).json()
        seen.extend((record["tenant"], record["purpose"]) for record in page["results"])
        url = page["next"]
    assert seen == [("acme", "eval")] * 5


def test_list_query_count_does_not_grow_with_rows(
    reader, tenant, other_tenant, django_assert_max_num_queries
):
    # The key (and its last-used stamp), the tenant, one page of trajectories, their steps, their rewards.
    imported(tenant, "first", rewards=[0.5])
    imported(other_tenant, "first", rewards=[0.5])
    with django_assert_max_num_queries(LIST_QUERIES):
        assert len(reader.get(LIST).json()["results"]) == 1
    for number in range(12):
        imported(tenant, f"more-{number}", rewards=[0.5, 1.0])  # five steps and two rewards each
    with django_assert_max_num_queries(LIST_QUERIES):
        results = reader.get(LIST, {"page_size": 20}).json()["results"]
    assert len(results) == 13
    assert all(len(record["steps"]) == 5 for record in results)
    assert sorted(len(record["rewards"]) for record in results) == [1] + [2] * 12


# --------------------------------------------------------------------------------------------------- detail


def test_detail_returns_the_imported_record_as_valid_atdp(reader, writer, tenant, other_tenant):
    record = atdp_record(tenant, "weather")
    (trajectory_id,) = _import(writer, record)
    imported(other_tenant, "weather", rewards=[0.5])
    response = reader.get(f"{LIST}{trajectory_id}/")
    assert response.status_code == 200
    body = response.json()
    assert validate_trajectory(body) == []
    assert body["trajectory_id"] == trajectory_id != record["trajectory_id"]  # an import gets a fresh id
    assert Trajectory.objects.get(pk=trajectory_id).source_trajectory_id == uuid.UUID(record["trajectory_id"])
    assert body["session_id"] == "weather"
    assert body["tenant"] == "acme"
    assert body["agent"] == record["agent"]
    assert [step["step_id"] for step in body["steps"]] == [step["step_id"] for step in record["steps"]]
    assert [step["index"] for step in body["steps"]] == [0, 1, 2, 3, 4]
    assert [step["kind"] for step in body["steps"]] == [step["kind"] for step in record["steps"]]
    for sent, stored in zip(record["steps"], body["steps"], strict=True):
        assert stored["parent_step_id"] == sent["parent_step_id"]
        assert stored["observation"]["messages"] == (sent["observation"].get("messages") or [])
        if sent["tokens"] is None:
            assert stored["tokens"] is None
            continue
        for name in ("prompt_ids", "completion_ids", "completion_logprobs", "completion_versions"):
            assert stored["tokens"][name] == sent["tokens"][name], name  # plain JSON lists again
    assert body["steps"][0]["action"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sorted(
        (reward["target"], reward["step_id"], reward["value"]) for reward in body["rewards"]
    ) == sorted((reward["target"], reward["step_id"], reward["value"]) for reward in record["rewards"])
    assert body["cost"]["prompt_tokens"] == record["cost"]["prompt_tokens"]


def test_detail_of_gateway_steps_unpacks_tokens_in_step_order(reader, tenant, other_tenant):
    first = gateway_step(
        tenant,
        "live",
        prompt_ids=[10, 11, 12],
        completion_ids=[20, 21, 22, 23],
        logprobs=[-0.5, -0.25, -1.0, -0.125],
    )
    second = gateway_step(
        tenant,
        "live",
        prompt_ids=[10, 11, 12, 20, 21, 22, 23, 30],
        completion_ids=[40],
        logprobs=[-2.0],
        policy_version=4,
        parent_step_id=first["step_id"],
    )
    ingested(tenant, "live", [first])
    trajectory = ingested(tenant, "live", [second])  # a later batch continues the indexes
    ingested(tenant, "other-session", [gateway_step(tenant, "other-session")])
    ingested(other_tenant, "live", [gateway_step(other_tenant, "live")])  # the same session id elsewhere

    body = reader.get(f"{LIST}{trajectory.id}/").json()
    assert validate_trajectory(body) == []
    assert [step["step_id"] for step in body["steps"]] == [first["step_id"], second["step_id"]]
    assert [step["index"] for step in body["steps"]] == [0, 1]
    assert body["steps"][1]["parent_step_id"] == first["step_id"]
    assert body["steps"][0]["tokens"]["prompt_ids"] == [10, 11, 12]
    assert body["steps"][0]["tokens"]["completion_ids"] == [20, 21, 22, 23]
    assert body["steps"][0]["tokens"]["completion_logprobs"] == [-0.5, -0.25, -1.0, -0.125]
    assert body["steps"][0]["tokens"]["completion_versions"] == [3, 3, 3, 3]
    assert body["steps"][1]["tokens"]["completion_versions"] == [4]
    assert body["steps"][0]["tokens"]["tokenizer"] == "policy-small"
    assert body["cost"]["prompt_tokens"] == 3 + 8
    assert body["cost"]["completion_tokens"] == 4 + 1
    assert body["cost"]["usd"] == pytest.approx(0.00025)


def test_aborted_and_retried_gateway_steps_are_valid_atdp(reader, tenant):
    first = gateway_step(tenant, "flaky")
    retry = gateway_step(tenant, "flaky", retry_of=first["step_id"])  # a retry shares its original's parent
    aborted = gateway_step(
        tenant,
        "flaky",
        parent_step_id=retry["step_id"],
        aborted=True,
        error="client disconnected mid-stream",
        result={"finish_reason": None, "error": "client disconnected mid-stream"},
    )
    failed = gateway_step(
        tenant,
        "flaky",
        parent_step_id=retry["step_id"],
        aborted=True,
        tokens=None,
        tokenizer="",
        error="the inference backend failed: ConnectError",
        result={"finish_reason": None},
    )
    trajectory = ingested(tenant, "flaky", [first, retry, aborted, failed])
    body = reader.get(f"{LIST}{trajectory.id}/").json()
    assert validate_trajectory(body) == []
    results = [step["result"] for step in body["steps"]]
    assert results[0] == results[1] == {"finish_reason": "stop", "error": None}
    assert results[2]["error"] == {"type": "aborted", "message": "client disconnected mid-stream"}
    assert results[3]["error"] == {"type": "aborted", "message": "the inference backend failed: ConnectError"}
    assert body["steps"][2]["tokens"]["completion_ids"] == [4, 5]  # the tokens produced before the abort
    assert body["steps"][3]["tokens"] is None


def test_another_tenants_trajectory_answers_exactly_like_a_missing_one(reader, tenant, other_tenant):
    foreign = imported(other_tenant, "secret", rewards=[1.0])
    mine = imported(tenant, "mine", rewards=[])
    assert reader.get(f"{LIST}{mine.id}/").status_code == 200
    hidden = reader.get(f"{LIST}{foreign.id}/")
    missing = reader.get(f"{LIST}{uuid.uuid4()}/")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json()
    assert hidden.json()["error"]["code"] == "trajectory_not_found"
    assert b"secret" not in hidden.content


def test_reading_needs_the_read_scope(api_client, tenant):
    trajectory = imported(tenant, "scoped", rewards=[])
    inference_only = api_client(["inference"])
    assert inference_only.get(LIST).status_code == 403
    assert inference_only.get(f"{LIST}{trajectory.id}/").status_code == 403
    assert inference_only.get(EXPORT).status_code == 403


# --------------------------------------------------------------------------------------------------- export


def test_export_streams_valid_atdp_lines_of_the_filter_and_tenant_only(reader, catalogue):
    ids, foreign = catalogue
    response = reader.get(EXPORT, {"agent": "coder"})
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    assert 'filename="acme-trajectories.jsonl"' in response["Content-Disposition"]
    lines = _body(response).decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert _ids(records) == {ids["b"], ids["c"]}
    assert len(records) == 2
    for record in records:
        assert validate_trajectory(record) == []

    everything = [json.loads(line) for line in _body(reader.get(EXPORT)).decode().splitlines()]
    assert _ids(everything) == set(ids.values())
    assert foreign not in _ids(everything)


def test_parquet_export_is_readable_with_pyarrow(reader, catalogue):
    ids, foreign = catalogue
    response = reader.get(EXPORT, {"format": "parquet"})
    assert response.status_code == 200, _body(response)[:500]
    assert response["Content-Type"] == "application/vnd.apache.parquet"
    data = _body(response)
    table = pq.read_table(io.BytesIO(data))
    assert table.num_rows == 4
    assert set(table.column("trajectory_id").to_pylist()) == set(ids.values())
    records = list(read_parquet(io.BytesIO(data)))
    assert all(validate_trajectory(record) == [] for record in records)
    assert {record["session_id"]: len(record["steps"]) for record in records} == {
        "s-a": 5,
        "s-b": 5,
        "s-c": 5,
        "s-d": 5,
    }

    filtered = pq.read_table(io.BytesIO(_body(reader.get(EXPORT, {"format": "parquet", "purpose": "eval"}))))
    assert filtered.column("trajectory_id").to_pylist() == [ids["b"]]
    assert filtered.num_rows == len(_body(reader.get(EXPORT, {"purpose": "eval"})).splitlines())


@pytest.mark.parametrize("kind", ["csv", "json", ""])
def test_an_unknown_export_format_is_a_400(reader, catalogue, kind):
    response = reader.get(EXPORT, {"format": kind})
    assert response.status_code == 400
    assert "format" in response.json()["error"]["fields"]


def test_export_of_another_tenant_is_empty(api_client, catalogue, other_tenant):
    ids, foreign = catalogue
    theirs = api_client(["trajectories:read"], of=other_tenant)
    records = [json.loads(line) for line in _body(theirs.get(EXPORT)).decode().splitlines()]
    assert _ids(records) == {foreign}
    assert not set(ids.values()) & _ids(records)


# --------------------------------------------------------------------------------------------------- import


def _post_jsonl(client, body: bytes, content_type="application/x-ndjson"):
    return client.generic("POST", IMPORT, body, content_type=content_type)


def _import(client, *records) -> list[str]:
    response = _post_jsonl(client, _jsonl(*records))
    assert response.status_code == 200, response.content
    assert response.json()["rejected"] == []
    return response.json()["trajectory_ids"]


def test_import_keeps_good_lines_and_reports_bad_ones_by_line_and_field(writer, tenant, other_tenant):
    good_first, good_last = atdp_record(tenant, "good-1"), atdp_record(tenant, "good-2")
    wrong_kind = atdp_record(tenant, "bad-kind")
    wrong_kind["steps"][1]["kind"] = "daydream"
    short_logprobs = atdp_record(tenant, "bad-tokens")
    short_logprobs["steps"][0]["tokens"]["completion_logprobs"].pop()
    body = b"".join(
        [
            _jsonl(good_first),
            b"{not json\n",
            b"\n",  # blank lines are skipped but still counted
            _jsonl(wrong_kind),
            _jsonl(short_logprobs),
            b'["a list"]\n',
            _jsonl(good_last),
        ]
    )
    response = _post_jsonl(writer, body)
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["accepted"] == 2
    assert [(entry["line"], entry["source_trajectory_id"]) for entry in report["stored"]] == [
        (1, good_first["trajectory_id"]),
        (7, good_last["trajectory_id"]),
    ]
    assert report["trajectory_ids"] == [entry["trajectory_id"] for entry in report["stored"]]
    rejected = {(entry["line"], entry["field"]) for entry in report["rejected"]}
    assert rejected == {(2, ""), (4, "steps[1].kind"), (5, "steps[0].tokens.completion_logprobs"), (6, "")}
    assert all(entry["message"] for entry in report["rejected"])

    stored = Trajectory.objects.for_tenant(tenant)
    assert set(stored.values_list("session_id", flat=True)) == {"good-1", "good-2"}
    assert Step.objects.filter(trajectory__session_id="good-1").count() == 5
    assert not Trajectory.objects.for_tenant(other_tenant).exists()


def test_import_refuses_a_record_of_another_tenant(writer, tenant, other_tenant):
    theirs = atdp_record(other_tenant, "planted")
    response = _post_jsonl(writer, _jsonl(theirs))
    assert response.status_code == 400
    assert response.json()["accepted"] == 0
    assert [(entry["line"], entry["field"]) for entry in response.json()["rejected"]] == [(1, "tenant")]
    assert not Trajectory.objects.filter(session_id="planted").exists()
    assert not Step.objects.filter(id=theirs["steps"][0]["step_id"]).exists()


def test_import_refuses_a_duplicate_trajectory(writer, tenant):
    record = atdp_record(tenant, "once")
    same_session = atdp_record(tenant, "once")  # another trajectory id, the same session
    response = _post_jsonl(writer, _jsonl(record, record, same_session))
    assert response.status_code == 200
    report = response.json()
    assert report["accepted"] == 1
    assert [(entry["line"], entry["field"]) for entry in report["rejected"]] == [
        (2, "trajectory_id"),
        (3, "trajectory_id"),
    ]
    again = _post_jsonl(writer, _jsonl(record))
    assert again.status_code == 400
    assert again.json()["accepted"] == 0
    assert Trajectory.objects.filter(session_id="once").count() == 1
    assert Step.objects.filter(trajectory__source_trajectory_id=record["trajectory_id"]).count() == 5


def test_import_of_records_reusing_stored_step_or_reward_ids_is_reported_not_a_crash(
    writer, tenant, other_tenant
):
    original = atdp_record(tenant, "original")
    _import(writer, original)
    foreign = imported(other_tenant, "foreign", rewards=[0.5])
    foreign_step_id = str(foreign.steps.order_by("index").first().id)

    copied_steps = atdp_record(tenant, "copied-steps")  # an export re-imported under a new id and session
    copied_steps["steps"] = json.loads(json.dumps(original["steps"]))
    copied_steps["rewards"] = []
    foreign_step = atdp_record(tenant, "foreign-step", rewards=[])
    foreign_step["steps"][4]["step_id"] = foreign_step_id
    copied_reward = atdp_record(tenant, "copied-reward", rewards=[])
    copied_reward["rewards"] = [dict(original["rewards"][1], idempotency_key="fresh-key")]
    reused_key = atdp_record(tenant, "reused-key", rewards=[0.5])
    reused_key["rewards"][0]["idempotency_key"] = original["rewards"][1]["idempotency_key"]
    fine = atdp_record(tenant, "fine")

    response = _post_jsonl(writer, _jsonl(copied_steps, foreign_step, copied_reward, reused_key, fine))
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["accepted"] == 1
    assert [entry["source_trajectory_id"] for entry in report["stored"]] == [fine["trajectory_id"]]
    fields = {(entry["line"], entry["field"]) for entry in report["rejected"]}
    assert {line for line, _ in fields} == {1, 2, 3, 4}
    assert (1, "steps[0].step_id") in fields
    assert (2, "steps[4].step_id") in fields
    assert (3, "rewards[0].reward_id") in fields
    assert (4, "rewards[0].idempotency_key") in fields
    assert set(Trajectory.objects.for_tenant(tenant).values_list("session_id", flat=True)) == {
        "original",
        "fine",
    }
    assert Step.objects.filter(id=foreign_step_id, tenant=other_tenant).exists()
    assert Reward.objects.filter(tenant=tenant).count() == 2 + 2


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json", 400),  # parsed, but JSON Lines were asked for
        ("text/plain", 415),
        ("multipart/form-data; boundary=xyz", 415),
    ],
)
def test_import_with_the_wrong_content_type_stores_nothing(writer, tenant, content_type, status):
    record = atdp_record(tenant, "typed")
    body = json.dumps(record).encode()
    response = _post_jsonl(writer, body, content_type=content_type)
    assert response.status_code == status
    assert "error" in response.json()
    assert not Trajectory.objects.exists()


def test_an_empty_import_stores_and_reports_nothing(writer):
    response = _post_jsonl(writer, b"\n\n")
    assert response.status_code == 200
    assert response.json() == {"accepted": 0, "trajectory_ids": [], "stored": [], "rejected": []}


def test_an_oversized_import_is_refused_whole(writer, tenant, monkeypatch):
    body = _jsonl(atdp_record(tenant, "big"))
    monkeypatch.setattr("apps.trajectories.apis.MAX_IMPORT_BYTES", len(body) - 1)
    response = _post_jsonl(writer, body)
    assert response.status_code == 400
    assert "at most" in response.json()["error"]["message"]
    assert not Trajectory.objects.exists()


def test_reading_scope_or_viewer_role_cannot_import(api_client, member, tenant):
    record = atdp_record(tenant, "denied")
    read_only = _post_jsonl(api_client(["trajectories:read"]), _jsonl(record))
    assert read_only.status_code == 403
    assert read_only.json()["error"]["code"] == "scope_missing"
    viewer = _post_jsonl(api_client(user=member(Role.VIEWER)), _jsonl(record))
    assert viewer.status_code == 403
    assert not Trajectory.objects.exists()
    assert not Step.objects.exists()
    operator = _post_jsonl(api_client(user=member(Role.OPERATOR)), _jsonl(record))
    assert operator.status_code == 200
    assert operator.json()["accepted"] == 1
