"""Checks on OpenAI-shaped request bodies before anything is forwarded: types and ranges, with the
parameter named in the error (400, OpenAI's shape)."""

from apps.gateway.errors import GatewayError

MAX_COMPLETION_TOKENS = 32768
MAX_CHOICES = 16
MAX_JSON_DEPTH = 128  # far beyond any real request (tool schemas included); deeper trips recursion downstream
MAX_LOGPROBS = 20  # the embedded server's and vLLM's limit of top logprobs on /v1/completions


def _fail(message: str, field: str) -> GatewayError:
    return GatewayError(400, message, "invalid_request", field=field)


def _number(body: dict, field: str, low: float, high: float) -> None:
    value = body.get(field)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"{field} must be a number", field)
    if not low <= value <= high:
        raise _fail(f"{field} must be between {low} and {high} (got {value})", field)


def nesting_exceeds(value, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests objects and arrays more than `limit` levels deep. Iterative, so a hostile
    body cannot exhaust the stack here; recursive code further on (sanitizer, translation, encoding) then can't."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                if child:
                    pending.append((child, depth + 1))
    return False


def body_nesting_exceeds(raw: bytes, body, limit: int = MAX_JSON_DEPTH) -> bool:
    """`nesting_exceeds` for a request body, skipping the walk when the raw bytes hold too few brackets to nest
    that deep (most requests)."""
    return raw.count(b"[") + raw.count(b"{") > limit and nesting_exceeds(body, limit)


MODEL_NAME_MAX = 200


def validate_common(body: dict) -> None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _fail("model is required and must be a string", "model")
    if "\x00" in body["model"] or len(body["model"]) > MODEL_NAME_MAX:  # names are stored (200, no NUL)
        raise _fail(f"model is a name of at most {MODEL_NAME_MAX} characters without NUL", "model")
    for field in ("max_tokens", "max_completion_tokens"):
        value = body.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _fail(f"{field} must be a positive integer", field)
        if isinstance(value, int) and value > MAX_COMPLETION_TOKENS:
            raise _fail(f"{field} must be at most {MAX_COMPLETION_TOKENS} (got {value})", field)
    _number(body, "temperature", 0, 2)
    _number(body, "top_p", 0, 1)
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise _fail(f"n must be an integer between 1 and {MAX_CHOICES}", "n")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _fail("stream must be a boolean", "stream")
    stop = body.get("stop")
    if (
        stop is not None
        and not isinstance(stop, str)
        and not (isinstance(stop, list) and all(isinstance(item, str) for item in stop) and len(stop) <= 4)
    ):
        raise _fail("stop must be a string or a list of up to 4 strings", "stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _fail("seed must be an integer", "seed")


def validate_chat(body: dict) -> None:
    validate_common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail("messages must be a non-empty list", "messages")
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in {
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
            "function",
        }:
            raise _fail(f"messages[{position}] needs a role of system, user, assistant or tool", "messages")
    tools = body.get("tools")
    if tools is not None and (
        not isinstance(tools, list)
        or not all(isinstance(tool, dict) and isinstance(tool.get("function"), dict) for tool in tools)
    ):
        raise _fail("tools must be a list of {type: function, function: {...}}", "tools")


def validate_completion(body: dict) -> None:
    validate_common(body)
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise _fail("prompt must be a non-empty string", "prompt")
    logprobs = body.get("logprobs")
    if logprobs is not None and (
        isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= MAX_LOGPROBS
    ):
        raise _fail(f"logprobs must be an integer between 0 and {MAX_LOGPROBS}", "logprobs")
