"""A copy of the tool-calling test model taught to end its turn: greedy decoding answers "OK." and stops
on any prompt (and still calls get_weather on the weather question). An agent framework treats a reply cut
at its token cap as a failed turn (the Agents SDK raises on `incomplete`), which the random default model,
which never stops, would always give."""

import shutil

import torch

from tests.workers.inference.conftest import WEATHER_CALL, WEATHER_QUESTION, WEATHER_TOOL

REPLY = "OK."
TERSE_MARGIN = 3.0  # logits: wide enough that batching noise in another process cannot flip a token
SYSTEMS = (None, "You are terse.", "Count.")
USERS = ("Hello", "One, two", "Say a word.")
TOOL_TURN = [
    *WEATHER_QUESTION,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18}'},
]


def _conversations():
    for system in SYSTEMS:
        head = [{"role": "system", "content": system}] if system else []
        for user in USERS:
            yield head + [{"role": "user", "content": user}], None
            yield (
                head
                + [
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": REPLY},
                    {"role": "user", "content": "And then?"},
                ],
                None,
            )
    yield TOOL_TURN, [WEATHER_TOOL]


def make_terse_model(tool_model_dir, out):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(tool_model_dir, out)
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)

    def pair(messages, tools, answer):
        prompt = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return prompt_ids, tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]

    pairs = [pair(messages, tools, REPLY) for messages, tools in _conversations()]
    pairs.append(pair(WEATHER_QUESTION, [WEATHER_TOOL], WEATHER_CALL))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tool_model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # two batches, the short prompts and the long ones with tools, each padded to its own width
    batches = [
        _batch([pair for pair in pairs if len(pair[0]) < 120]),
        _batch([p for p in pairs if len(p[0]) >= 120]),
    ]
    for _ in range(300):
        optimizer.zero_grad()
        worst = float("inf")
        for input_ids, mask, labels in batches:
            output = model(input_ids=input_ids, attention_mask=mask, labels=labels)
            worst = min(worst, _worst_margin(output.logits.detach(), labels))
            output.loss.backward()
        if worst >= TERSE_MARGIN:
            break
        optimizer.step()
    else:
        raise AssertionError(f"the terse model did not learn its replies (worst margin {worst:.2f})")
    model.eval()
    model.save_pretrained(out)
    return out


def _batch(pairs):
    width = max(len(prompt) + len(target) for prompt, target in pairs)
    input_ids = torch.zeros(len(pairs), width, dtype=torch.long)
    mask = torch.zeros(len(pairs), width, dtype=torch.long)
    labels = torch.full((len(pairs), width), -100)
    for row, (prompt, target) in enumerate(pairs):  # right-padded: positions are those of the prompt alone
        ids = prompt + target
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
        labels[row, len(prompt) : len(ids)] = torch.tensor(target)
    return input_ids, mask, labels


def _worst_margin(logits, labels) -> float:
    """The smallest margin of a target token over the best other token, teacher-forced."""
    logits, wanted = logits[:, :-1].clone(), labels[:, 1:]
    answer = wanted != -100
    wanted = wanted.clamp(min=0)
    chosen = logits.gather(-1, wanted[..., None])[..., 0]
    logits.scatter_(-1, wanted[..., None], float("-inf"))
    return float((chosen - logits.max(dim=-1).values)[answer].min())
