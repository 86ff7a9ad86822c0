"""What both trainers share: the prompts, the toy reward, the sizes. Imported by both sides (no torch here)."""

PROMPTS = [
    "The weather desk answers: what is the forecast for Paris tomorrow?",
    "Summarize the ticket: the user cannot log in after the password reset.",
]
GROUP_SIZE = 8  # generations per prompt
COMPLETION_TOKENS = 32
LEARNING_RATE = 1e-5
VOCAB_HALF = 3072 // 2


def low_half_fraction(completion_ids) -> float:
    """The toy reward: fraction of completion tokens from the lower half of the vocabulary."""
    ids = list(completion_ids)
    return sum(1 for token in ids if token < VOCAB_HALF) / max(len(ids), 1)
