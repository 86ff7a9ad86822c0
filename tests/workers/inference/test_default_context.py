"""The default model takes the agent frameworks' own prompts: 4,096 positions of context (smolagents' default
system prompt alone is about 2,000 tokens), and a default model made when it had 1,024 is widened in place."""

import json
import shutil

from workers.inference.engine import InferenceEngine
from workers.inference.modelgen import MAX_POSITION_EMBEDDINGS, widen_context
from workers.inference.sampling import SamplingParams


def test_the_default_model_serves_a_prompt_of_three_thousand_tokens(default_model_dir):
    config = json.loads((default_model_dir / "config.json").read_text())
    assert config["max_position_embeddings"] == MAX_POSITION_EMBEDDINGS >= 4096
    engine = InferenceEngine(default_model_dir).start()
    try:
        assert engine.max_model_len == MAX_POSITION_EMBEDDINGS
        prompt = [10 + position % 1000 for position in range(3000)]  # ids within the vocabulary
        result = engine.generate(prompt, SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
        assert len(result.choices[0].token_ids) == 4
    finally:
        engine.stop()


def test_a_default_model_of_1024_positions_is_widened_and_no_other_model_is(default_model_dir, tmp_path):
    old = tmp_path / "old-default"
    shutil.copytree(default_model_dir, old)
    for name, field in (
        ("config.json", "max_position_embeddings"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        content = json.loads((old / name).read_text())
        content[field] = 1024
        (old / name).write_text(json.dumps(content))
    other = tmp_path / "other"
    shutil.copytree(old, other)
    config = json.loads((other / "config.json").read_text())
    config["hidden_size"] = 512  # not the default model's shape
    (other / "config.json").write_text(json.dumps(config))

    assert widen_context(old) is True
    assert json.loads((old / "config.json").read_text())["max_position_embeddings"] == MAX_POSITION_EMBEDDINGS
    assert (
        json.loads((old / "tokenizer_config.json").read_text())["model_max_length"] == MAX_POSITION_EMBEDDINGS
    )
    assert widen_context(old) is False  # already wide
    assert widen_context(other) is False
    assert json.loads((other / "config.json").read_text())["max_position_embeddings"] == 1024
