"""The agent-facing gateway's contract as an OpenAPI document, for schemathesis to fuzz.

The gateway validates bodies by hand (apps/gateway/validation.py for the OpenAI paths, anthropic_wire.py for
/v1/messages, rl.py for the RL and reward paths) and has no schema of its own; this document writes down
what those functions accept, the status codes the gateway contract in the design names for each path, and
the two error shapes (OpenAI's on /v1 and /rl, Anthropic's on /v1/messages). Data that fits it is a request
the gateway must serve; data that does not must be refused with a documented 4xx in the right shape.

Generation is kept cheap on purpose: the served model is the embedded one, `max_tokens` is at most 4 and
prompts are short (the fuzz test also caps `max_tokens` in generated negative data, see `cheap_body`).
"""

MAX_TOKENS = 4
OPENAI_ERROR_TYPES = [
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "conflict_error",
    "rate_limit_error",
    "api_error",
]
ANTHROPIC_ERROR_TYPES = [
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
]
ERROR_DESCRIPTIONS = {
    400: "malformed or invalid body",
    401: "no key, or a bad or ended key",
    403: "scope or model not allowed",
    404: "unknown model, session or step",
    409: "conflict",
    410: "the session has ended",
    413: "payload too large",
    422: "invalid body or refused content",
    429: "rate limit, budget or capacity",
}


def _short_text(max_length: int = 40) -> dict:
    return {"type": "string", "maxLength": max_length}


def _errors(statuses, shape: str) -> dict:
    return {
        str(status): {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{shape}"}}},
        }
        for status in statuses
    }


def _operation(
    *,
    operation_id: str,
    body: str | None,
    success: dict,
    errors,
    shape: str = "OpenAIError",
    parameters: list | None = None,
) -> dict:
    operation = {
        "operationId": operation_id,
        "security": [{"bearer": []}],
        "parameters": parameters or [],
        "responses": {**success, **_errors(errors, shape)},
    }
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
        }
    return operation


def _json_or_stream(schema: str) -> dict:
    return {
        "200": {
            "description": "the answer, or its server-sent events when `stream` is true",
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}},
                "text/event-stream": {"schema": {"$ref": "#/components/schemas/ServerSentEvent"}},
            },
        }
    }


def _json(status: int, schema: dict) -> dict:
    return {str(status): {"description": "done", "content": {"application/json": {"schema": schema}}}}


GENERATION_ERRORS = [400, 401, 403, 404, 410, 413, 422, 429]
SESSION_HEADERS = [
    {
        "name": "X-Session-Id",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "maxLength": 200},
    },
    {
        "name": "X-Areal-Purpose",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "enum": ["production", "eval"]},
    },
]

_SAMPLING = {
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "n": {"type": "integer", "minimum": 1, "maximum": 2},
    "stream": {"type": "boolean"},
    "stop": {"oneOf": [_short_text(8), {"type": "array", "maxItems": 4, "items": _short_text(8)}]},
    "seed": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
}


def gateway_contract(model: str) -> dict:
    """The OpenAPI 3.0 document of the gateway's paths; `model` is the one the tenant is served."""
    model_name = {"type": "string", "enum": [model]}
    schemas = {
        "ServerSentEvent": {
            "type": "object",
            "required": ["data"],
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
        },
        "OpenAIError": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["message", "type", "code"],
                    "properties": {
                        "message": {"type": "string", "minLength": 1},
                        "type": {"type": "string", "enum": OPENAI_ERROR_TYPES},
                        "code": {"type": "string", "minLength": 1},
                        "param": {"type": "string", "nullable": True},
                    },
                }
            },
        },
        "AnthropicError": {
            "type": "object",
            "required": ["type", "error"],
            "properties": {
                "type": {"type": "string", "enum": ["error"]},
                "error": {
                    "type": "object",
                    "required": ["type", "message"],
                    "properties": {
                        "type": {"type": "string", "enum": ANTHROPIC_ERROR_TYPES},
                        "message": {"type": "string", "minLength": 1},
                    },
                },
            },
        },
        "ChatMessage": {
            "type": "object",
            "required": ["role", "content"],
            "additionalProperties": False,
            "properties": {
                "role": {"type": "string", "enum": ["system", "user", "assistant"]},
                "content": _short_text(),
            },
        },
        "Tool": {
            "type": "object",
            "required": ["type", "function"],
            "additionalProperties": False,
            "properties": {
                "type": {"type": "string", "enum": ["function"]},
                "function": {
                    "type": "object",
                    "required": ["name", "parameters"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-z_]{1,16}$"},
                        "description": _short_text(),
                        "parameters": {
                            "type": "object",
                            "properties": {"type": {"type": "string", "enum": ["object"]}},
                        },
                    },
                },
            },
        },
        "ChatRequest": {
            "type": "object",
            "required": ["model", "messages", "max_tokens"],
            "additionalProperties": False,
            "properties": {
                "model": model_name,
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"$ref": "#/components/schemas/ChatMessage"},
                },
                "tools": {"type": "array", "maxItems": 2, "items": {"$ref": "#/components/schemas/Tool"}},
                **_SAMPLING,
            },
        },
        "CompletionRequest": {
            "type": "object",
            "required": ["model", "prompt", "max_tokens"],
            "additionalProperties": False,
            "properties": {
                "model": model_name,
                "prompt": {"type": "string", "minLength": 1, "maxLength": 40},
                "logprobs": {"type": "integer", "minimum": 0, "maximum": 5},
                **_SAMPLING,
            },
        },
        "ChatCompletion": {
            "type": "object",
            "required": ["id", "object", "choices"],
            "properties": {
                "id": {"type": "string"},
                "object": {"type": "string", "enum": ["chat.completion"]},
                "choices": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "required": ["index", "message"]},
                },
                "usage": {"type": "object"},
            },
        },
        "Completion": {
            "type": "object",
            "required": ["id", "object", "choices"],
            "properties": {
                "id": {"type": "string"},
                "object": {"type": "string", "enum": ["text_completion"]},
                "choices": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "required": ["index", "text"]},
                },
                "usage": {"type": "object"},
            },
        },
        "TextBlock": {
            "type": "object",
            "required": ["type", "text"],
            "additionalProperties": False,
            "properties": {"type": {"type": "string", "enum": ["text"]}, "text": _short_text()},
        },
        "AnthropicMessage": {
            "type": "object",
            "required": ["role", "content"],
            "additionalProperties": False,
            "properties": {
                "role": {"type": "string", "enum": ["user", "assistant"]},
                "content": {
                    "oneOf": [
                        _short_text(),
                        {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 2,
                            "items": {"$ref": "#/components/schemas/TextBlock"},
                        },
                    ]
                },
            },
        },
        "AnthropicTool": {
            "type": "object",
            "required": ["name", "input_schema"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z_]{1,16}$"},
                "description": _short_text(),
                "input_schema": {
                    "type": "object",
                    "properties": {"type": {"type": "string", "enum": ["object"]}},
                },
            },
        },
        "MessagesRequest": {
            "type": "object",
            "required": ["model", "max_tokens", "messages"],
            "additionalProperties": False,
            "properties": {
                "model": model_name,
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"$ref": "#/components/schemas/AnthropicMessage"},
                },
                "system": {
                    "oneOf": [
                        _short_text(),
                        {"type": "array", "maxItems": 2, "items": {"$ref": "#/components/schemas/TextBlock"}},
                    ]
                },
                "temperature": {"type": "number", "minimum": 0, "maximum": 1},
                "top_p": {"type": "number", "minimum": 0, "maximum": 1},
                "top_k": {"type": "integer", "minimum": 0, "maximum": 100},
                "stop_sequences": {
                    "type": "array",
                    "maxItems": 4,
                    "items": {"type": "string", "minLength": 1, "maxLength": 8},
                },
                "stream": {"type": "boolean"},
                "metadata": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"user_id": _short_text()},
                },
                "tools": {
                    "type": "array",
                    "maxItems": 2,
                    "items": {"$ref": "#/components/schemas/AnthropicTool"},
                },
                "tool_choice": {
                    "type": "object",
                    "required": ["type"],
                    "additionalProperties": False,
                    "properties": {"type": {"type": "string", "enum": ["auto", "none"]}},
                },
            },
        },
        "Message": {
            "type": "object",
            "required": ["id", "type", "role", "content", "stop_reason", "usage"],
            "properties": {
                "id": {"type": "string"},
                "type": {"type": "string", "enum": ["message"]},
                "role": {"type": "string", "enum": ["assistant"]},
                "content": {"type": "array"},
                "stop_reason": {"type": "string"},
                "usage": {"type": "object"},
            },
        },
        "StartSessionRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "task_id": {"type": "string", "maxLength": 200},
                "group_size": {"type": "integer", "minimum": 1, "maximum": 1024},
            },
        },
        "SetRewardRequest": {
            "type": "object",
            "required": ["reward"],
            "additionalProperties": False,
            "properties": {
                "reward": {"type": "number", "minimum": -1e6, "maximum": 1e6},
                "interaction_id": {"type": "string", "maxLength": 200},
                "completion_id": {"type": "string", "maxLength": 200},
                "session_id": {"type": "string", "maxLength": 200},
            },
        },
        "EndSessionRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "final_reward": {"type": "number", "minimum": -1e6, "maximum": 1e6},
                "session_id": {"type": "string", "maxLength": 200},
            },
        },
        "RewardRequest": {
            "type": "object",
            "required": ["value"],
            "minProperties": 2,
            "maxProperties": 4,
            "additionalProperties": False,
            "properties": {
                "session_id": {"type": "string", "minLength": 1, "maxLength": 200},
                "step_id": {"type": "string", "minLength": 1, "maxLength": 200},
                "value": {"type": "number", "minimum": 0, "maximum": 1},
                "kind": {"type": "string", "enum": ["numeric", "boolean"]},
                "source": {"type": "string", "enum": ["user", "agent", "environment", "rule"]},
                "comment": {"type": "string", "maxLength": 200},
                "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
            },
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "areal-web gateway (test contract)", "version": "1"},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/v1/chat/completions": {
                "post": _operation(
                    operation_id="chat",
                    body="ChatRequest",
                    success=_json_or_stream("ChatCompletion"),
                    errors=GENERATION_ERRORS,
                    parameters=SESSION_HEADERS,
                )
            },
            "/v1/completions": {
                "post": _operation(
                    operation_id="completions",
                    body="CompletionRequest",
                    success=_json_or_stream("Completion"),
                    errors=GENERATION_ERRORS,
                    parameters=SESSION_HEADERS,
                )
            },
            "/v1/messages": {
                "post": _operation(
                    operation_id="messages",
                    body="MessagesRequest",
                    success=_json_or_stream("Message"),
                    errors=GENERATION_ERRORS,
                    shape="AnthropicError",
                    parameters=SESSION_HEADERS,
                )
            },
            "/v1/models": {
                "get": _operation(
                    operation_id="models",
                    body=None,
                    errors=[401, 403, 429],
                    success=_json(
                        200,
                        {
                            "type": "object",
                            "required": ["object", "data"],
                            "properties": {
                                "object": {"type": "string", "enum": ["list"]},
                                "data": {
                                    "type": "array",
                                    "items": {"type": "object", "required": ["id", "object"]},
                                },
                            },
                        },
                    ),
                )
            },
            "/v1/rewards": {
                "post": _operation(
                    operation_id="rewards",
                    body="RewardRequest",
                    errors=[400, 401, 403, 404, 409, 410, 413, 422],
                    success={
                        **_json(200, {"type": "object", "required": ["reward_id"]}),
                        **_json(201, {"type": "object", "required": ["reward_id"]}),
                    },
                )
            },
            "/rl/start_session": {
                "post": _operation(
                    operation_id="start_session",
                    body="StartSessionRequest",
                    errors=[400, 401, 403, 409, 413, 422, 429],
                    success=_json(200, {"type": "object", "required": ["session_id", "api_key", "task_id"]}),
                )
            },
            "/rl/set_reward": {
                "post": _operation(
                    operation_id="set_reward",
                    body="SetRewardRequest",
                    errors=[400, 401, 403, 404, 409, 410, 413, 422],
                    success=_json(
                        200, {"type": "object", "required": ["status", "reward_id", "interaction_id"]}
                    ),
                )
            },
            "/rl/end_session": {
                "post": _operation(
                    operation_id="end_session",
                    body="EndSessionRequest",
                    errors=[400, 401, 403, 404, 409, 410, 413, 422],
                    success=_json(200, {"type": "object", "required": ["status", "session_id", "steps"]}),
                )
            },
        },
    }
