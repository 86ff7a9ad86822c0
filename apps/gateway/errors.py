"""Errors in the client's own shape: OpenAI's on /v1 and /rl, Anthropic's on /v1/messages."""

import json

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    503: "api_error",
    504: "api_error",
}


class GatewayError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        *,
        retry_after: int | None = None,
        field: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.retry_after, self.field = (
            status,
            message,
            code,
            retry_after,
            field,
        )

    def openai_body(self) -> bytes:
        return json.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": _OPENAI_TYPES.get(self.status, "api_error"),
                    "code": self.code,
                    "param": self.field,
                }
            }
        ).encode()

    def anthropic_body(self) -> bytes:
        from apps.gateway.anthropic_wire import anthropic_error

        return json.dumps(anthropic_error(self.status, self.message)).encode()
