"""vLLM's served logprobs against a direct transformers forward pass over the same token ids."""

import pytest

from tests.vllm.conftest import SERVED_MODEL
from tests.vllm.helpers import LOGPROB_TOLERANCE, PROMPTS, chat, complete, max_logprob_error
from tests.vllm.reference import ReferenceModel

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def reference(model_dir):
    return ReferenceModel(model_dir)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_logprobs_match_transformers(openai_client, reference, stream):
    parsed = chat(openai_client, SERVED_MODEL, stream=stream, max_tokens=48, temperature=1.0, seed=5)

    assert max_logprob_error(reference, parsed) <= LOGPROB_TOLERANCE


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_logprobs_match_transformers(openai_client, reference, prompt):
    parsed = complete(
        openai_client, SERVED_MODEL, prompt, stream=False, max_tokens=48, temperature=1.0, seed=1
    )

    assert len(parsed.choices[0].logprobs) > 1
    assert max_logprob_error(reference, parsed) <= LOGPROB_TOLERANCE


def test_logprobs_are_of_the_unscaled_distribution_at_any_temperature(openai_client, reference):
    # vLLM's default --logprobs-mode raw_logprobs: what the model gives before temperature, so a trainer
    # that samples at T != 1 recomputes behaviour logprobs or serves with processed_logprobs.
    parsed = complete(
        openai_client, SERVED_MODEL, PROMPTS[1], stream=False, max_tokens=24, temperature=0.3, seed=2
    )

    assert max_logprob_error(reference, parsed) <= LOGPROB_TOLERANCE
