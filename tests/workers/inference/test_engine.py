import threading

import pytest
import torch

from tests.workers.inference.conftest import load_reference_model, reference_logprobs
from workers.inference.engine import ContextLengthError, InferenceEngine
from workers.inference.modelgen import MAX_POSITION_EMBEDDINGS as CONTEXT
from workers.inference.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(default_model_dir):
    engine = InferenceEngine(default_model_dir).start()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def reference(default_model_dir):
    return load_reference_model(default_model_dir)


def prompts(engine, count):
    encode = engine.tokenizer.backend_tokenizer.encode
    return [
        encode("The agent reads the file" + " again" * index, add_special_tokens=False).ids
        for index in range(count)
    ]


def assert_matches_forward_pass(reference, prompt, choice):
    expected = reference_logprobs(reference, prompt, choice.token_ids)
    assert torch.allclose(torch.tensor(choice.logprobs), expected, atol=1e-4, rtol=0)


def test_greedy_logprobs_match_a_forward_pass(engine, reference):
    [prompt] = prompts(engine, 1)
    result = engine.generate(prompt, GREEDY)
    [choice] = result.choices
    assert result.prompt_token_ids == tuple(prompt)
    assert len(choice.token_ids) == 20
    assert choice.finish_reason == "length"
    assert choice.policy_versions == (0,) * 20
    assert_matches_forward_pass(reference, prompt, choice)


def test_sampled_logprobs_are_raw_not_tempered(engine, reference):
    [prompt] = prompts(engine, 1)
    params = SamplingParams(max_tokens=16, temperature=1.7, top_p=0.8, n=3, seed=11, ignore_eos=True)
    result = engine.generate(prompt, params)
    assert len(result.choices) == 3
    for choice in result.choices:
        assert_matches_forward_pass(reference, prompt, choice)


def test_seed_makes_sampling_reproducible_and_choices_differ(engine):
    [prompt] = prompts(engine, 1)
    params = SamplingParams(max_tokens=12, temperature=1.0, n=2, seed=5, ignore_eos=True)
    first, second = engine.generate(prompt, params), engine.generate(prompt, params)
    assert [c.token_ids for c in first.choices] == [c.token_ids for c in second.choices]
    assert first.choices[0].token_ids != first.choices[1].token_ids


def test_concurrent_requests_share_decoding_steps_and_match_solo_runs(engine, reference):
    batch_prompts = prompts(engine, 8)
    solo = [engine.generate(prompt, GREEDY) for prompt in batch_prompts]
    engine.reset_stats()
    streams = [engine.submit(prompt, GREEDY) for prompt in batch_prompts]
    batched = [stream.result() for stream in streams]
    stats = engine.stats()
    assert stats.max_decode_batch_size == 8
    assert stats.decode_steps < 8 * 19  # one at a time would take 19 steps per request
    for prompt, alone, together in zip(batch_prompts, solo, batched, strict=True):
        assert together.choices[0].token_ids == alone.choices[0].token_ids
        assert_matches_forward_pass(reference, prompt, together.choices[0])


def test_requests_arriving_mid_generation_join_the_running_batch(engine, reference):
    long_prompt, *short_prompts = prompts(engine, 8)
    engine.reset_stats()
    long_stream = engine.submit(long_prompt, SamplingParams(max_tokens=150, temperature=0, ignore_eos=True))
    first_tokens = long_stream.iterate()
    next(first_tokens)  # the long request is decoding now
    joined = [engine.submit(prompt, GREEDY) for prompt in short_prompts]
    results = [stream.result() for stream in joined]
    for _ in first_tokens:
        pass
    assert engine.stats().max_decode_batch_size == 8
    for prompt, result in zip(short_prompts, results, strict=True):
        assert_matches_forward_pass(reference, prompt, result.choices[0])


def test_stop_string_and_stop_token(engine):
    [prompt] = prompts(engine, 1)
    free = engine.generate(prompt, GREEDY).choices[0]
    stop_text = free.text[3:6]
    stopped = engine.generate(
        prompt, SamplingParams(max_tokens=20, temperature=0, stop=(stop_text,))
    ).choices[0]
    assert stopped.finish_reason == "stop"
    assert stopped.stop_reason == stop_text
    assert stopped.text == free.text[: free.text.index(stop_text)]
    stop_token = free.token_ids[2]
    by_token = engine.generate(
        prompt, SamplingParams(max_tokens=20, temperature=0, stop_token_ids=(stop_token,))
    )
    assert by_token.choices[0].token_ids == free.token_ids[: free.token_ids.index(stop_token) + 1]
    assert by_token.choices[0].stop_reason == stop_token


def test_context_limit_is_enforced_with_a_clear_message(engine):
    [prompt] = prompts(engine, 1)
    with pytest.raises(ContextLengthError, match=f"maximum context length is {CONTEXT}"):
        engine.submit(prompt, SamplingParams(max_tokens=CONTEXT))
    long_prompt = [10 + position % 1000 for position in range(CONTEXT - 14)]  # ids within the vocabulary
    default = engine.generate(long_prompt, SamplingParams(temperature=0, ignore_eos=True))
    assert len(default.choices[0].token_ids) == 14


def test_abort_ends_a_running_request(engine):
    [prompt] = prompts(engine, 1)
    stream = engine.submit(prompt, SamplingParams(max_tokens=900, temperature=0, ignore_eos=True))
    events = stream.iterate()
    next(events)
    engine.abort(stream.request_id)
    rest = [event for batch in events for event in batch]
    assert rest[-1].finish_reason == "abort"
    assert len(rest) < 900


def test_pause_freezes_generation_until_resume(engine):
    [prompt] = prompts(engine, 1)
    stream = engine.submit(prompt, SamplingParams(max_tokens=200, temperature=0, ignore_eos=True))
    events = stream.iterate()
    first = next(events)
    engine.pause()
    try:
        frozen_at = engine.stats().generated_tokens
        waiting = engine.submit(prompt, GREEDY)
        threading.Event().wait(0.3)
        assert engine.stats().generated_tokens == frozen_at
        assert engine.status().paused
        assert engine.status().waiting_requests == 1
    finally:
        engine.resume()
    assert len(first) + sum(len(batch) for batch in events) == 200
    assert len(waiting.result().choices[0].token_ids) == 20
