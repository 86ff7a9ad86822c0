"""What both trainers share: the prompts, the toy reward, the sizes. Imported by both sides (no torch here)."""

PROMPTS = [
    "The weather desk answers: what is the forecast for Paris tomorrow?",
    "Summarize the ticket: the user cannot log in after the password reset.",
]
GROUP_SIZE = 8  # generations per prompt (the toy model's default; run.py passes the size to both sides)
COMPLETION_TOKENS = 32
LEARNING_RATE = 1e-5
VOCAB_HALF = 3072 // 2  # the toy model's; a real model's is read from its config (vocab_half)
# LoRA on both sides (ours: workers.engines LoraSettings; TRL: peft LoraConfig): the same adapter
LORA_RANK = 8
LORA_ALPHA = 16
LORA_DROPOUT = 0.0
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def vocab_half(model_dir) -> int:
    """Half of the model's vocabulary, from its config.json."""
    import json
    from pathlib import Path

    return int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]) // 2


def low_half_fraction(completion_ids, half: int = VOCAB_HALF) -> float:
    """The toy reward: fraction of completion tokens from the lower half of the vocabulary."""
    ids = list(completion_ids)
    return sum(1 for token in ids if token < half) / max(len(ids), 1)
