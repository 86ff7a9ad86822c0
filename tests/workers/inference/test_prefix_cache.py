"""The engine's prefix cache: prompts that start like an earlier one prefill only their new tokens and
sample exactly what a full forward pass gives; a weight swap empties it and recomputes the most recently
used prompt; the store is bounded."""

import torch

from tests.workers.inference.conftest import load_reference_model, reference_logprobs
from workers.inference.engine import InferenceEngine
from workers.inference.prefix_cache import BLOCK, PrefixCache
from workers.inference.sampling import SamplingParams

SYSTEM = (
    "You are the weather desk. Answer with the temperature of the city the user names, call the tool "
    "when you do not know it, and keep every answer short. "
) * 3


def encode(engine, text):
    return engine.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def test_prompts_sharing_a_system_prompt_reuse_its_keys_and_match_a_forward_pass(
    default_model_dir, tool_model_dir
):
    engine = InferenceEngine(default_model_dir).start()
    try:
        questions = ["Paris?", "How warm is Oslo today?", "And Lima, please"]
        prompts = [encode(engine, SYSTEM + question) for question in questions]
        assert len(prompts[0]) > 3 * BLOCK
        params = SamplingParams(max_tokens=12, temperature=1.0, seed=3, ignore_eos=True)
        first = engine.generate(prompts[0], params)  # nothing cached yet: stored
        assert engine.stats().prefix_hit_tokens == 0
        rest = [engine.submit(prompt, params, incremental=False) for prompt in prompts[1:]]
        results = [first] + [stream.result() for stream in rest]
        shared = len(prompts[0]) - len(encode(engine, questions[0])) - 2  # the system prompt, give or take
        assert engine.stats().prefix_hit_tokens >= 2 * (shared // BLOCK * BLOCK) > 0
        reference = load_reference_model(default_model_dir)
        for prompt, result in zip(prompts, results, strict=True):
            [choice] = result.choices
            expected = reference_logprobs(reference, prompt, choice.token_ids)
            assert torch.allclose(torch.tensor(choice.logprobs), expected, atol=1e-4, rtol=0)
        # A second turn continues the first one's prompt: most of it is a hit too.
        follow_up = (
            list(prompts[0]) + list(results[0].choices[0].token_ids) + encode(engine, " Thanks. Rome?")
        )
        hits_before = engine.stats().prefix_hit_tokens
        [choice] = engine.generate(follow_up, params).choices
        assert engine.stats().prefix_hit_tokens - hits_before >= len(prompts[0]) // BLOCK * BLOCK
        assert torch.allclose(
            torch.tensor(choice.logprobs),
            reference_logprobs(reference, follow_up, choice.token_ids),
            atol=1e-4,
            rtol=0,
        )

        # New weights: the cache is emptied and its most recently used prompt prefilled again under them,
        # so the next prompt hits keys and values the new weights computed (the logprobs say which).
        computed_before = engine.stats().prefill_tokens
        engine.load_checkpoint(tool_model_dir, version=1)
        assert engine.stats().prefill_tokens - computed_before == len(prompts[0])  # the warm-up of the cache
        hits_before = engine.stats().prefix_hit_tokens
        [choice] = engine.generate(prompts[1], params).choices
        assert engine.stats().prefix_hit_tokens > hits_before
        expected = reference_logprobs(load_reference_model(tool_model_dir), prompts[1], choice.token_ids)
        assert torch.allclose(torch.tensor(choice.logprobs), expected, atol=1e-4, rtol=0)
        assert choice.policy_versions == (1,) * 12
    finally:
        engine.stop()


def test_the_store_keeps_the_longest_boundary_short_of_the_last_token_and_evicts_beyond_its_budget():
    def kv(length):
        return [torch.full((1, 2, length, 4), float(length))], [torch.zeros(1, 2, length, 4)]

    cache = PrefixCache(budget_tokens=200)
    first = tuple(range(100))
    cache.store(first, *kv(100))
    assert cache.lookup(tuple(range(64))) is not None
    assert cache.lookup(tuple(range(64))).length == 32
    hit = cache.lookup(first + (7, 8))
    assert hit.length == 96
    assert hit.keys[0].shape == (1, 2, 96, 4)
    assert cache.lookup((1,) + first) is None
    assert cache.lookup(tuple(range(20))) is None
    cache.store(tuple(range(1000, 1090)), *kv(90))
    cache.store(tuple(range(2000, 2050)), *kv(50))  # 240 tokens > 200: the least recently used goes
    assert cache.tokens == 140
    assert cache.lookup(first + (7,)) is None
    assert cache.lookup(tuple(range(1000, 1070))).length == 64
    assert cache.most_recent() == tuple(range(1000, 1090))  # the last looked up
    cache.clear()
    assert cache.most_recent() is None
    assert cache.tokens == 0
    assert cache.lookup(tuple(range(1000, 1070))) is None
