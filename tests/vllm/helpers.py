"""Shared prompts, tolerance and request helpers for the vLLM tier."""

from workers.inference.client import ParsedCompletion, parse_response, parse_stream

# Measured on this CPU in float32: vLLM's logprobs differ from a transformers forward pass over the same
# ids by at most ~1e-6 (base weights, perturbed weights and a LoRA adapter alike). The assertion
# leaves two orders of magnitude for other CPUs' kernels and thread counts.
LOGPROB_TOLERANCE = 1e-4

CHAT_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is the weather in Paris today?"},
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PROMPTS = [
    "The quick brown fox",
    "def add(a, b):",
    "User: book a table for two at eight\nAssistant:",
    "1, 2, 3, 4,",
]


def chat(client, model: str, *, stream: bool, max_tokens: int = 12, **options) -> ParsedCompletion:
    request = dict(
        model=model,
        messages=options.pop("messages", CHAT_MESSAGES),
        max_tokens=max_tokens,
        logprobs=True,
        extra_body={"return_token_ids": True},
        **options,
    )
    if not stream:
        return parse_response(client.chat.completions.create(**request).model_dump())
    chunks = client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
    return parse_stream(chunk.model_dump() for chunk in chunks)


def complete(
    client, model: str, prompt: str, *, stream: bool, max_tokens: int = 12, **options
) -> ParsedCompletion:
    request = dict(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        logprobs=0,
        extra_body={"return_token_ids": True},
        **options,
    )
    if not stream:
        return parse_response(client.completions.create(**request).model_dump())
    chunks = client.completions.create(**request, stream=True, stream_options={"include_usage": True})
    return parse_stream(chunk.model_dump() for chunk in chunks)


def max_logprob_error(reference, parsed: ParsedCompletion) -> float:
    choice = parsed.choices[0]
    expected = reference.token_logprobs(parsed.prompt_token_ids, choice.completion_token_ids)
    return max(abs(want - got) for want, got in zip(expected, choice.logprobs, strict=True))
