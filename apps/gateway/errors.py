"""Errors in the client's own shape: OpenAI's on /v1 and /rl, Anthropic's on /v1/messages."""

import json

from apps.core.error_types import error_type


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
                    "type": error_type(self.status),
                    "code": self.code,
                    "param": self.field,
                }
            }
        ).encode()

    def anthropic_body(self) -> bytes:
        from apps.gateway.anthropic_wire import anthropic_error

        return json.dumps(anthropic_error(self.status, self.message)).encode()
