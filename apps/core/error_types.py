"""HTTP status → error `type`: the one table behind every error body the platform writes.

Two vocabularies share it: OpenAI's, which the REST API's {"error": {"code", "message", "type"}} and the
gateway's OpenAI-shaped errors (on /v1 and /rl) use, and Anthropic's, for the gateway's /v1/messages. A
status missing from the table is `api_error` in OpenAI's vocabulary; in Anthropic's it is `api_error` from
500 up and `invalid_request_error` below.

Django-free on purpose: the Anthropic translation (apps.gateway.anthropic_wire) must not import Django, and
apps.core.errors (the REST API's handler) does.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ErrorTypes:
    openai: str
    anthropic: str


INVALID = ErrorTypes("invalid_request_error", "invalid_request_error")
SERVER = ErrorTypes("api_error", "api_error")
OVERLOADED = ErrorTypes("api_error", "overloaded_error")

ERROR_TYPES_BY_STATUS: dict[int, ErrorTypes] = {
    400: INVALID,
    401: ErrorTypes("authentication_error", "authentication_error"),
    403: ErrorTypes("permission_error", "permission_error"),
    404: ErrorTypes("not_found_error", "not_found_error"),
    405: INVALID,
    409: ErrorTypes("conflict_error", "invalid_request_error"),  # Anthropic has no conflict type
    410: INVALID,
    413: ErrorTypes("invalid_request_error", "request_too_large"),
    415: INVALID,
    422: INVALID,
    429: ErrorTypes("rate_limit_error", "rate_limit_error"),
    500: SERVER,
    502: SERVER,
    503: OVERLOADED,
    504: SERVER,
    529: OVERLOADED,  # Anthropic's "overloaded"
}


def error_type(status: int) -> str:
    """The OpenAI-vocabulary `type` of an error answered with `status` (REST API and gateway /v1, /rl)."""
    types = ERROR_TYPES_BY_STATUS.get(status)
    return types.openai if types else "api_error"


def anthropic_error_type(status: int) -> str:
    """The Anthropic `error.type` of an error answered with `status` (gateway /v1/messages)."""
    types = ERROR_TYPES_BY_STATUS.get(status)
    if types:
        return types.anthropic
    return "api_error" if status >= 500 else "invalid_request_error"
