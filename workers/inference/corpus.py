"""A generated training corpus for the default tokenizer: prose, numbers, JSON tool calls and ChatML turns.

The corpus is a pure function of its seed so that the tokenizer trained on it is reproducible offline.
"""

import json
import random

SUBJECTS = [
    "the agent",
    "a user",
    "the model",
    "our team",
    "the operator",
    "an annotator",
    "the server",
    "my friend",
    "the weather service",
    "the store",
    "a customer",
    "the city",
    "this function",
    "the report",
    "the teacher",
    "a student",
    "the engineer",
    "the robot",
    "the assistant",
    "the manager",
]
VERBS = [
    "reads",
    "writes",
    "checks",
    "opens",
    "sends",
    "finds",
    "computes",
    "returns",
    "updates",
    "answers",
    "needs",
    "wants",
    "calls",
    "searches",
    "books",
    "cancels",
    "orders",
    "explains",
    "builds",
    "tests",
]
OBJECTS = [
    "the file",
    "an email",
    "the weather",
    "a ticket",
    "the order",
    "a number",
    "the answer",
    "a table",
    "the map",
    "the train",
    "a flight",
    "the report",
    "the price",
    "a recipe",
    "the list",
    "the code",
    "the result",
    "a message",
    "the calendar",
    "the score",
]
ENDINGS = [
    "today",
    "tomorrow",
    "right now",
    "before noon",
    "after lunch",
    "every morning",
    "in Paris",
    "in Tokyo",
    "in Berlin",
    "for the user",
    "with care",
    "again",
    "on Monday",
    "on Friday",
    "at home",
    "quickly",
]
QUESTIONS = [
    "What is the weather in {city}?",
    "How much is {a} plus {b}?",
    "Can you find {obj} for me?",
    "Please send {obj} to {name}.",
    "Where is order {order}?",
    "What time is it in {city}?",
    "Multiply {a} by {b}, please.",
    "Who wrote {obj}?",
    "Read the file {path} and summarize it.",
]
CITIES = [
    "Paris",
    "Tokyo",
    "Berlin",
    "Lagos",
    "Lima",
    "Oslo",
    "Cairo",
    "Delhi",
    "Austin",
    "Seoul",
    "Rome",
    "Quito",
]
NAMES = [
    "Alice",
    "Bob",
    "Carol",
    "Dave",
    "Erin",
    "Frank",
    "Grace",
    "Heidi",
    "Ivan",
    "Judy",
    "Mallory",
    "Oscar",
]
TOOLS: dict[str, dict[str, str | list[str]]] = {
    "get_weather": {"city": "string", "unit": ["celsius", "fahrenheit"]},
    "add": {"a": "number", "b": "number"},
    "multiply": {"a": "number", "b": "number"},
    "search_web": {"query": "string", "limit": "integer"},
    "lookup_order": {"order_id": "string"},
    "send_email": {"to": "string", "subject": "string", "body": "string"},
    "read_file": {"path": "string"},
    "get_time": {"city": "string"},
}


def generate_corpus(*, seed: int = 1234, documents: int = 3000) -> list[str]:
    rng = random.Random(seed)
    makers = [_sentence, _numbers, _tool_definition, _tool_call, _chat_transcript]
    return [rng.choice(makers)(rng) for _ in range(documents)]


def _sentence(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        text = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)}"
        parts.append(text[0].upper() + text[1:] + rng.choice([".", ".", "!", "?"]))
    return " ".join(parts)


def _numbers(rng: random.Random) -> str:
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    return rng.choice(
        [
            f"{a} + {b} = {a + b}",
            f"{a} * {b} = {a * b}",
            f"The total is {a}.{b:02d} dollars.",
            f"On 2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} at {rng.randint(0, 23):02d}:{b % 60:02d}",
            f"Order #{a}{b} has {rng.randint(1, 9)} items, {rng.randint(1, 99)}% done.",
            " ".join(str(rng.randint(0, 10_000)) for _ in range(rng.randint(3, 12))),
        ]
    )


def _arguments(rng: random.Random, name: str) -> dict:
    values: dict[str, str | int | float] = {}
    for argument, kind in TOOLS[name].items():
        if isinstance(kind, list):
            values[argument] = rng.choice(kind)
        elif kind == "number":
            values[argument] = rng.choice([rng.randint(0, 500), round(rng.uniform(0, 100), 2)])
        elif kind == "integer":
            values[argument] = rng.randint(1, 20)
        elif argument == "city":
            values[argument] = rng.choice(CITIES)
        elif argument == "path":
            values[argument] = f"/data/{rng.choice(OBJECTS).split()[-1]}_{rng.randint(1, 99)}.txt"
        elif argument == "to":
            values[argument] = f"{rng.choice(NAMES).lower()}@example.com"
        else:
            values[argument] = _sentence(rng)[:40]
    return values


def _tool_definition(rng: random.Random) -> str:
    name = rng.choice(sorted(TOOLS))
    properties = {
        argument: {"type": "string", "enum": kind} if isinstance(kind, list) else {"type": kind}
        for argument, kind in TOOLS[name].items()
    }
    definition = {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Use {name.replace('_', ' ')} when {_sentence(rng).lower()}",
            "parameters": {"type": "object", "properties": properties, "required": sorted(properties)},
        },
    }
    return json.dumps(definition, ensure_ascii=False)


def _tool_call(rng: random.Random) -> str:
    name = rng.choice(sorted(TOOLS))
    return "<tool_call>" + json.dumps({"name": name, "arguments": _arguments(rng, name)}) + "</tool_call>"


def _question(rng: random.Random) -> str:
    return rng.choice(QUESTIONS).format(
        city=rng.choice(CITIES),
        a=rng.randint(0, 99),
        b=rng.randint(0, 99),
        obj=rng.choice(OBJECTS),
        name=rng.choice(NAMES),
        order=rng.randint(1000, 9999),
        path=f"/tmp/{rng.choice(NAMES).lower()}.txt",
    )


def _chat_transcript(rng: random.Random) -> str:
    turns = ["<|im_start|>system\nYou are a helpful assistant.<|im_end|>"]
    for _ in range(rng.randint(1, 3)):
        turns.append(f"<|im_start|>user\n{_question(rng)}<|im_end|>")
        if rng.random() < 0.5:
            turns.append(f"<|im_start|>assistant\n{_tool_call(rng)}<|im_end|>")
            result = json.dumps({"result": _numbers(rng)})
            turns.append(f"<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>")
        turns.append(f"<|im_start|>assistant\n{_sentence(rng)}<|im_end|>")
    return "\n".join(turns) + "<|endoftext|>"
