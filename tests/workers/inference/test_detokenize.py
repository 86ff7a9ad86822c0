import pytest
from transformers import AutoTokenizer

from workers.inference.detokenize import IncrementalDetokenizer


@pytest.fixture(scope="module")
def backend(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir).backend_tokenizer


def stream(backend, text, stop=()):
    detokenizer = IncrementalDetokenizer(backend, stop)
    deltas, stop_string = [], None
    for token_id in backend.encode(text, add_special_tokens=False).ids:
        step = detokenizer.push(token_id)
        deltas.append(step.delta)
        if step.stop_string:
            stop_string = step.stop_string
            break
    else:
        deltas.append(detokenizer.flush())
    return deltas, stop_string, detokenizer.text


def test_deltas_add_up_to_the_text(backend):
    text = "The agent reads the file today. 123 + 456 = 579"
    deltas, stop_string, final = stream(backend, text)
    assert "".join(deltas) == text == final
    assert stop_string is None


def test_multibyte_characters_are_never_split(backend):
    text = "snow ☃ and 日本語 ok"
    deltas, _, _ = stream(backend, text)
    assert "".join(deltas) == text
    assert all("\ufffd" not in delta for delta in deltas)


def test_stop_string_truncates_and_is_never_streamed(backend):
    deltas, stop_string, final = stream(backend, "Hello world. STOP here and more", stop=("STOP",))
    assert stop_string == "STOP"
    assert final == "Hello world. " == "".join(deltas)


def test_earliest_of_several_stop_strings_wins(backend):
    _, stop_string, final = stream(backend, "abc xyz def", stop=("def", "xyz"))
    assert stop_string == "xyz"
    assert final == "abc "
