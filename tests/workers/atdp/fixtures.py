"""Builders of realistic ATDP v1 records, reusable outside these tests (Django-free).

`make_trajectory()` is a complete, valid trajectory of a tool-using agent: an llm_call that asks for a
tool, the tool_call and its tool_result, a second llm_call whose prompt extends the first call's ids
(so the training view merges them), and a user_feedback step; one step reward and one trajectory
reward. Every call makes fresh uuids. Logprobs are float32-exact so records survive Parquet unchanged."""

import copy
import uuid

TOKENIZER = "qwen2-tokenizer-3f9a2c1d"
STARTED_AT = "2025-03-04T10:15:00.120Z"

SYSTEM_AND_QUESTION_IDS = [
    151644,
    8948,
    198,
    2610,
    525,
    264,
    10950,
    17847,
    13,
    151645,
    198,
    151644,
    872,
    198,
    3838,
    374,
    279,
    9104,
    304,
    12095,
    30,
    151645,
    198,
    151644,
    77091,
    198,
]
TOOL_CALL_IDS = [
    151657,
    5212,
    606,
    788,
    330,
    455,
    69364,
    497,
    330,
    16370,
    788,
    5212,
    8926,
    788,
    330,
    59604,
    9207,
    151658,
    151645,
]
TOOL_RESULT_IDS = [
    198,
    151644,
    872,
    198,
    27,
    14172,
    9655,
    29,
    17,
    17,
    356,
    11,
    39698,
    522,
    14172,
    9655,
    29,
    151645,
    198,
    151644,
    77091,
    198,
]
ANSWER_IDS = [785, 9104, 304, 12095, 374, 220, 17, 17, 30937, 323, 39698, 13, 151645]


def new_id() -> str:
    return str(uuid.uuid4())


def float32_logprobs(count: int, *, start: float = -0.125) -> list[float]:
    """Logprobs that are exact in float32 (multiples of 1/64), like those read back from storage."""
    return [start - (position % 16) / 64 for position in range(count)]


def make_cost(**overrides) -> dict:
    cost = {"prompt_tokens": 0, "completion_tokens": 0, "latency_ms": 0, "ttft_ms": None, "usd": 0.0}
    cost.update(overrides)
    return cost


def make_tokens(
    prompt_ids: list[int], completion_ids: list[int], *, policy_version: int = 7, **overrides
) -> dict:
    tokens = {
        "tokenizer": TOKENIZER,
        "prompt_ids": list(prompt_ids),
        "completion_ids": list(completion_ids),
        "completion_logprobs": float32_logprobs(len(completion_ids)),
        "completion_versions": [policy_version] * len(completion_ids),
        "loss_mask": None,
    }
    tokens.update(overrides)
    return tokens


def make_step(
    index: int,
    kind: str = "llm_call",
    *,
    parent_step_id: str | None = None,
    tokens: dict | None = None,
    created_at: str | None = None,
    **overrides,
) -> dict:
    prompt_count = len(tokens["prompt_ids"]) if tokens else 0
    completion_count = len(tokens["completion_ids"]) if tokens else 0
    step = {
        "step_id": new_id(),
        "index": index,
        "parent_step_id": parent_step_id,
        "kind": kind,
        "observation": {},
        "state": {},
        "action": {},
        "result": {},
        "tokens": tokens,
        "versions": {
            "model_version": None,
            "policy_version": None,
            "tools": {},
            "prompt_version": None,
            "gateway": "areal-web/0.1.0",
        },
        "cost": make_cost(prompt_tokens=prompt_count, completion_tokens=completion_count),
        "permissions": {"scopes": ["gateway:call"], "data_class": "internal"},
        "pii": {"redacted": False, "entities": []},
        "replayable": "non_replayable",
        "created_at": created_at or f"2025-03-04T10:15:0{min(index, 9)}.500+00:00",
    }
    step.update(overrides)
    return step


def make_reward(
    *, target: str = "trajectory", step_id: str | None = None, value: float = 1.0, **overrides
) -> dict:
    reward = {
        "reward_id": new_id(),
        "target": target,
        "step_id": step_id,
        "value": value,
        "kind": "numeric",
        "label": None,
        "source": "evaluator",
        "timing": "terminal" if target == "trajectory" else "immediate",
        "created_by": "unit-tests-evaluator",
        "created_at": "2025-03-04T10:16:00Z",
        "idempotency_key": None,
    }
    reward.update(overrides)
    return reward


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def make_steps() -> list[dict]:
    """llm_call → tool_call → tool_result → llm_call → user_feedback."""
    first_prompt = SYSTEM_AND_QUESTION_IDS
    second_prompt = first_prompt + TOOL_CALL_IDS + TOOL_RESULT_IDS
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    first = make_step(
        0,
        tokens=make_tokens(first_prompt, TOOL_CALL_IDS),
        observation={
            "messages": messages,
            "tools": [WEATHER_TOOL],
            "params": {"temperature": 1.0, "max_tokens": 256},
        },
        state={"system_prompt_version": "weather-v3", "plan": ["look up weather", "answer"]},
        action={
            "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            "tool_calls": [call],
            "text": None,
        },
        result={"finish_reason": "tool_calls"},
        versions={
            "model_version": "qwen2-0.5b-rl-7",
            "policy_version": 7,
            "tools": {"get_weather": "1.2.0"},
            "prompt_version": "weather-v3",
            "gateway": "areal-web/0.1.0",
        },
        cost=make_cost(
            prompt_tokens=len(first_prompt),
            completion_tokens=len(TOOL_CALL_IDS),
            latency_ms=412,
            ttft_ms=38,
            usd=0.000125,
        ),
        replayable="approximate",
    )
    tool_call = make_step(
        1,
        "tool_call",
        parent_step_id=first["step_id"],
        action={"tool_calls": [call]},
        permissions={"scopes": ["tools:weather"], "data_class": "public"},
        replayable="deterministic",
    )
    tool_result = make_step(
        2,
        "tool_result",
        parent_step_id=tool_call["step_id"],
        result={
            "tool_results": [{"tool_call_id": "call_1", "content": "22 C, sunny", "exit_code": 0}],
            "error": None,
        },
        replayable="deterministic",
    )
    second = make_step(
        3,
        tokens=make_tokens(second_prompt, ANSWER_IDS, completion_versions=[7] * 6 + [8] * 7),
        parent_step_id=tool_result["step_id"],
        observation={
            "messages": [*messages, {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"}],
            "tools": [WEATHER_TOOL],
            "params": {"temperature": 1.0},
        },
        action={
            "message": {"role": "assistant", "content": "The weather in Paris is 22 C and sunny."},
            "text": "The weather in Paris is 22 C and sunny.",
        },
        result={"finish_reason": "stop"},
        versions={
            "model_version": "qwen2-0.5b-rl-8",
            "policy_version": 8,
            "tools": {},
            "prompt_version": "weather-v3",
            "gateway": "areal-web/0.1.0",
        },
        cost=make_cost(
            prompt_tokens=len(second_prompt),
            completion_tokens=len(ANSWER_IDS),
            latency_ms=230,
            ttft_ms=21,
            usd=0.0002,
        ),
    )
    feedback = make_step(
        4,
        "user_feedback",
        parent_step_id=second["step_id"],
        observation={"messages": [{"role": "user", "content": "thanks, perfect"}]},
        result={"user_outcome": {"action": "accept"}},
    )
    return [first, tool_call, tool_result, second, feedback]


def make_trajectory(**overrides) -> dict:
    """A complete valid ATDP v1 trajectory; keyword arguments replace top-level fields (deep-copied)."""
    steps = make_steps()
    record = {
        "atdp_version": "1.0",
        "trajectory_id": new_id(),
        "session_id": "sess-7f3a9b",
        "tenant": "acme",
        "agent": {"name": "weather-agent", "version": "2.4.1"},
        "task_id": "weather-paris",
        "group_id": "grpo-group-0042",
        "status": "complete",
        "purpose": "production",
        "started_at": STARTED_AT,
        "ended_at": "2025-03-04T11:15:09.002+01:00",
        "steps": steps,
        "rewards": [
            make_reward(
                target="step",
                step_id=steps[0]["step_id"],
                value=0.25,
                kind="numeric",
                source="rule",
                created_by="rule:valid-tool-call",
            ),
            make_reward(
                target="trajectory",
                value=1.0,
                kind="boolean",
                source="user",
                created_by="ak_3f9a",
                label="accepted",
                idempotency_key="sess-7f3a9b:thumbs",
            ),
        ],
        "governance": {
            "consent": "full",
            "data_class": "internal",
            "retention_until": "2026-03-04T00:00:00Z",
            "review": {
                "status": "approved",
                "reviewer": "dana@acme.test",
                "at": "2025-03-05T09:00:00Z",
                "note": "clean tool use",
            },
            "qualification": {"status": "qualified", "reasons": [], "at": "2025-03-05T09:00:01Z"},
            "training_use": True,
        },
        "cost": make_cost(
            prompt_tokens=sum(step["cost"]["prompt_tokens"] for step in steps),
            completion_tokens=sum(step["cost"]["completion_tokens"] for step in steps),
            latency_ms=sum(step["cost"]["latency_ms"] for step in steps),
            ttft_ms=None,
            usd=sum(step["cost"]["usd"] for step in steps),
        ),
    }
    record.update(copy.deepcopy(overrides))
    return record
