"""The training view: an ATDP trajectory flattened into token-level samples.

A sample is `{input_ids, loss_mask, logprobs, versions, reward, group_id, trajectory_id, step_ids}`.
llm_call steps with tokens are taken in step order. Each starts a new sample unless its `prompt_ids`
begin with the whole `input_ids` of the sample so far (and it uses the same tokenizer): then it extends
that sample. The extension is the rest of its prompt (context the model did not generate: tool output,
the next user turn, template tokens; loss_mask 0, logprob 0.0, version -1) followed by its completion
(loss_mask 1, its behaviour logprobs and versions). A step that carries its own `loss_mask` (covering
its prompt then its completion) has that mask used for the tokens it contributes.

PII rule (ATDP.md): the ids of a redacted step still encode the original text, so a step whose
`pii.redacted` is true is used only when `tokens.retokenized` is true. Otherwise it is excluded, and
the sample in progress ends there, so nothing after it is glued across it. llm_call steps without
tokens (consent metadata_only, or an engine that returned none) are excluded the same way.
training_view_exclusions() lists both, with reasons.

Trajectory-level gates (purpose eval/replay, `training_use`, qualification, consent) are not applied
here; training_blockers() names the ones that fail, and the caller decides.
"""

EXCLUDED_PII_REDACTED = "pii_redacted_not_retokenized"
EXCLUDED_NO_TOKENS = "llm_call_without_tokens"

CONTEXT_LOGPROB = 0.0
CONTEXT_VERSION = -1
UNTRAINABLE_PURPOSES = ("eval", "replay")


def training_reward(record: dict) -> float | None:
    """The last trajectory-target reward's value (rewards are listed in creation order); else the sum of
    the step rewards; else None."""
    rewards = record.get("rewards") or []
    trajectory_values = [reward["value"] for reward in rewards if reward["target"] == "trajectory"]
    if trajectory_values:
        return trajectory_values[-1]
    step_values = [reward["value"] for reward in rewards if reward["target"] == "step"]
    return sum(step_values) if step_values else None


def training_view_exclusions(record: dict) -> list[tuple[str, str]]:
    """(step_id, reason) for every llm_call step kept out of the token-level samples."""
    exclusions = []
    for step in record["steps"]:
        reason = _exclusion_reason(step)
        if reason is not None:
            exclusions.append((step["step_id"], reason))
    return exclusions


def training_samples(record: dict) -> list[dict]:
    """Token-level samples of one (valid) trajectory; see the module docstring for the merge rule."""
    reward = training_reward(record)
    samples: list[dict] = []
    current: dict | None = None
    tokenizer = None
    for step in record["steps"]:
        if step["kind"] != "llm_call":
            continue
        if _exclusion_reason(step) is not None:
            current = None
            continue
        tokens = step["tokens"]
        prompt_ids, completion_ids = tokens["prompt_ids"], tokens["completion_ids"]
        extends = (
            current is not None
            and tokens["tokenizer"] == tokenizer
            and len(prompt_ids) >= len(current["input_ids"])
            and prompt_ids[: len(current["input_ids"])] == current["input_ids"]
        )
        if current is None or not extends:
            current = {
                "input_ids": [],
                "loss_mask": [],
                "logprobs": [],
                "versions": [],
                "reward": reward,
                "group_id": record["group_id"],
                "trajectory_id": record["trajectory_id"],
                "step_ids": [],
            }
            samples.append(current)
            tokenizer = tokens["tokenizer"]
        already = len(current["input_ids"])
        context_count = len(prompt_ids) - already
        mask = tokens["loss_mask"]
        current["input_ids"] += prompt_ids[already:]
        current["input_ids"] += completion_ids
        if mask is None:
            current["loss_mask"] += [0] * context_count + [1] * len(completion_ids)
        else:
            current["loss_mask"] += mask[already:]
        current["logprobs"] += [CONTEXT_LOGPROB] * context_count
        current["logprobs"] += tokens["completion_logprobs"]
        current["versions"] += [CONTEXT_VERSION] * context_count
        current["versions"] += tokens["completion_versions"]
        current["step_ids"].append(step["step_id"])
    return samples


def training_blockers(record: dict) -> list[str]:
    """Why this trajectory must not be trained on at all; empty when nothing in the record forbids it."""
    governance = record["governance"]
    blockers = []
    if record["purpose"] in UNTRAINABLE_PURPOSES:
        blockers.append(f"purpose is {record['purpose']}")
    if not governance["training_use"]:
        blockers.append("training_use is false")
    if governance["consent"] != "full":
        blockers.append(f"consent is {governance['consent']}")
    if governance["qualification"]["status"] != "qualified":
        blockers.append(f"qualification is {governance['qualification']['status']}")
    return blockers


def _exclusion_reason(step: dict) -> str | None:
    if step["kind"] != "llm_call":
        return None
    tokens = step["tokens"]
    if tokens is None:
        return EXCLUDED_NO_TOKENS
    if step["pii"]["redacted"] and not tokens.get("retokenized", False):
        return EXCLUDED_PII_REDACTED
    return None
