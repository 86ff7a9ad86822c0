"""BFCL without a server: demonstrations from the train split's ground truth, their SFT samples, and the
held-out measurement of a checkpoint by an in-process engine (the demo's warm-up, its gate and bench/bfcl).

- `demonstration(case)`: a single-turn case's request and the answer its ground truth gives, as a
  conversation (the user's turn, then an assistant message with the calls; for `irrelevance`, a refusal in
  words). Built for the train split only: `demonstrations(categories)` refuses nothing else and takes no
  held-out case. Each one is checked by BFCL's checker before it is used (one that does not score right is
  left out, and counted).
- `sft_sample(tokenizer, case, messages)`: the conversation rendered with the model's chat template and the
  case's tools, loss on the assistant's tokens only.
- `measure(model_dir, cases)`: greedy answers of the checkpoint to the cases' first turns, scored by BFCL's
  checker (scoring.py), per category. Single-turn categories only: a multi-turn case needs the agent's loop
  (agent.py) and is refused here.

No Django; the engine and the trainer are the project's own (workers.inference, workers.engines).
"""

import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from workers.envs.bfcl.calls import ToolCall
from workers.envs.bfcl.cases import Case, load_cases
from workers.envs.bfcl.scoring import score_single_turn
from workers.envs.bfcl.tools import openai_tools, tool_name, turn_messages

# What the demonstration of an `irrelevance` case answers: no function fits, so it calls none.
DECLINE = "None of the functions I have can answer this, so I will not call any of them."


# ---- demonstrations ----------------------------------------------------------------------------------


def _allowed(options: list):
    """The first allowed value of a BFCL possible-answer list ("" marks a parameter that may be left out)."""
    for option in options:
        if option != "":
            return _plain(option)
    return None


def _plain(value):
    # Inside a possible answer a dict maps each key to its allowed values (in lists of dicts too).
    if isinstance(value, dict):
        return {key: _allowed(options) for key, options in value.items() if _allowed(options) is not None}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def ground_truth_calls(case: Case) -> list[ToolCall]:
    """The calls a single-turn case's ground truth asks for, each argument its first allowed value (an
    optional one the function's document does not name is left out). `irrelevance`: none."""
    if case.multi_turn:
        raise ValueError(f"{case.case_id} is a multi-turn case; its ground truth is call strings per turn")
    documents = {function["name"]: function for function in case.functions}
    calls = []
    for expected in case.ground_truth or []:
        ((name, parameters),) = expected.items()
        known = documents[name].get("parameters", {}).get("properties", {})
        arguments = {
            key: _allowed(options)
            for key, options in parameters.items()
            if _allowed(options) is not None and (key in known or "" not in options)
        }
        calls.append(ToolCall(tool_name(name), json.dumps(arguments, ensure_ascii=False)))
    return calls


def demonstration(case: Case) -> list[dict]:
    """The case's first turn and the ground truth's answer, as a chat conversation."""
    calls = ground_truth_calls(case)
    if not calls:
        return [*turn_messages(case, 0), {"role": "assistant", "content": DECLINE}]
    return [
        *turn_messages(case, 0),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for index, call in enumerate(calls)
            ],
        },
    ]


@dataclass(frozen=True)
class Demonstrations:
    cases: tuple[Case, ...]  # train-split cases whose ground-truth answer scores right, in a seeded order
    left_out: tuple[str, ...] = field(default=())  # case ids whose answer BFCL's checker did not accept


def demonstrations(categories: Iterable[str], *, count: int | None = None, seed: int = 0) -> Demonstrations:
    """Up to `count` train-split cases of `categories` (all of them when None), shuffled by `seed` and taken
    round-robin over the categories so every category is shown; each one's answer checked by BFCL."""
    rng = random.Random(f"bfcl-demonstrations:{seed}")
    pools = []
    left_out = []
    for category in categories:
        cases = [case for case in load_cases(category, split="train") if not case.multi_turn]
        kept = []
        for case in cases:
            if score_single_turn(case, ground_truth_calls(case)).valid:
                kept.append(case)
            else:
                left_out.append(case.case_id)
        rng.shuffle(kept)
        pools.append(kept)
    chosen: list[Case] = []
    while any(pools) and (count is None or len(chosen) < count):
        for pool in pools:
            if pool and (count is None or len(chosen) < count):
                chosen.append(pool.pop())
    return Demonstrations(cases=tuple(chosen), left_out=tuple(left_out))


def sft_sample(tokenizer, case: Case, messages: Sequence[dict], name: str, *, reward: float = 1.0):
    """`messages` (the case's request and an answer) rendered with the case's tools; loss on the assistant's
    tokens up to and with its end token."""
    from workers.rl.samples import TrainingSample

    ids = _render(tokenizer, case, messages, generation_prompt=False)
    prompt = _render(tokenizer, case, messages[:-1], generation_prompt=True)
    if ids[: len(prompt)] != prompt:
        raise ValueError(f"{case.case_id}: the answer's rendering does not extend the prompt's")
    mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if end in ids[len(prompt) :]:  # nothing after the assistant's end token is learned (a trailing newline)
        last = len(prompt) + ids[len(prompt) :].index(end)
        mask = mask[: last + 1] + [0] * (len(ids) - last - 1)
    size = len(ids)
    return TrainingSample(
        input_ids=tuple(ids),
        loss_mask=tuple(mask),
        logprobs=(0.0,) * size,
        versions=(-1,) * size,
        turns=(0,) * size,
        reward=reward,
        group_id=name,
        task_id=case.case_id,
        trajectory_id=name,
        step_ids=(name,),
    )


def _render(tokenizer, case: Case, messages, *, generation_prompt: bool) -> list[int]:
    from workers.inference.chat import render_chat_prompt

    text = render_chat_prompt(
        tokenizer, list(messages), tools=openai_tools(case), add_generation_prompt=generation_prompt
    )
    return tokenizer(text)["input_ids"]


def train_on_demonstrations(
    model_dir,
    out_dir,
    conversations: Sequence[tuple[Case, list[dict]]],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int = 0,
    progress: Callable[[int, int, float], None] | None = None,
    seconds: float | None = None,
    micro_batch_tokens: int = 2048,
) -> int:
    """SFT of `model_dir` on `conversations` ((case, messages) pairs), `steps` batches of `batch_size`
    drawn in a seeded order (again from the start once all were used), exported to `out_dir`; with
    `seconds`, no new batch starts once that much time has passed (bench/bfcl's equal wall time). Returns
    the steps trained."""
    import time

    import torch
    from transformers import AutoTokenizer

    from workers.engines import TrainConfig, Trainer

    if not conversations:
        raise ValueError("no conversation to train on")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(seed)
    rng = random.Random(f"bfcl-sft:{seed}")
    samples = [
        sft_sample(tokenizer, case, messages, f"sft-{index}")
        for index, (case, messages) in enumerate(conversations)
    ]
    config = TrainConfig(
        algorithm="sft",
        learning_rate=learning_rate,
        schedule="constant",
        warmup_steps=min(3, steps),
        total_steps=steps,
        micro_batch_tokens=micro_batch_tokens,
        seed=seed,
    )
    trainer = Trainer(model_dir, config)
    order: list[int] = []
    started = time.monotonic()
    trained = 0
    for step in range(steps):
        if seconds is not None and time.monotonic() - started >= seconds:
            break
        batch: list = []
        while len(batch) < batch_size:
            if not order:
                order = list(range(len(samples)))
                rng.shuffle(order)
            batch.append(samples[order.pop()])
        metrics = trainer.step(batch, current_version=0)
        trained = step + 1
        if progress:
            progress(trained, steps, metrics.loss)
    trainer.export(out_dir)
    return trained


# ---- held-out measurement ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    accuracy: float  # over every case measured
    cases: int
    per_category: dict[str, dict]  # category → {"accuracy", "cases", "right"}
    reasons: dict[str, int]  # BFCL's error types of the failed cases (and "right")
    outcomes: dict[str, bool] = field(default_factory=dict)  # case id → right


def heldout_cases(categories: Iterable[str], *, per_category: int | None = None) -> list[Case]:
    """The held-out split's single-turn cases of `categories`, the first `per_category` of each in the
    package's order (all when None)."""
    chosen = []
    for category in categories:
        cases = [case for case in load_cases(category, split="heldout") if not case.multi_turn]
        chosen.extend(cases if per_category is None else cases[:per_category])
    return chosen


def answer_cases(engine, cases: Sequence[Case], *, max_tokens: int = 256, temperature: float = 0.0, seed=0):
    """The engine's replies to each case's first turn (the engine batches them): (content, calls) each."""
    from workers.inference.chat import parse_assistant_text
    from workers.inference.sampling import SamplingParams

    streams = []
    for number, case in enumerate(cases):
        prompt = _render(engine.tokenizer, case, turn_messages(case, 0), generation_prompt=True)
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            seed=None if seed is None else seed * 100_003 + number,
        )
        streams.append(engine.submit(prompt, params, incremental=False))
    replies = []
    for stream in streams:
        reply = parse_assistant_text(stream.result().choices[0].text)
        calls = [ToolCall(call.name, call.arguments) for call in reply.tool_calls]
        replies.append((reply.content or "", calls))
    return replies


def measure(model_dir, cases: Sequence[Case], *, max_tokens: int = 256, max_batch_size: int = 16) -> Measured:
    """Greedy held-out accuracy of the checkpoint in `model_dir` on `cases`, by BFCL's checker."""
    from workers.inference.engine import InferenceEngine

    if any(case.multi_turn for case in cases):
        raise ValueError("measure takes single-turn cases; a multi-turn case runs through the agent's loop")
    engine = InferenceEngine(model_dir, max_batch_size=max_batch_size).start()
    try:
        replies = answer_cases(engine, cases, max_tokens=max_tokens, temperature=0.0)
    finally:
        engine.stop()
    return tally(
        cases, [score_single_turn(case, calls) for case, (_, calls) in zip(cases, replies, strict=True)]
    )


def tally(cases: Sequence[Case], verdicts: Sequence) -> Measured:
    """Per-category accuracy of `verdicts` (scoring.Score, one per case)."""
    per: dict[str, list[int]] = {}
    reasons: Counter = Counter()
    outcomes = {}
    for case, verdict in zip(cases, verdicts, strict=True):
        right, total = per.setdefault(case.category, [0, 0])
        per[case.category] = [right + int(verdict.valid), total + 1]
        reasons["right" if verdict.valid else (verdict.error_type or "wrong")] += 1
        outcomes[case.case_id] = verdict.valid
    right_all = sum(right for right, _ in per.values())
    return Measured(
        accuracy=right_all / max(len(cases), 1),
        cases=len(cases),
        per_category={
            category: {"accuracy": right / total, "cases": total, "right": right}
            for category, (right, total) in per.items()
        },
        reasons=dict(reasons),
        outcomes=outcomes,
    )
