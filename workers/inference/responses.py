"""OpenAI-shaped response bodies and stream chunks, with vLLM's token-id extension fields.

Extension fields (present when the request sets `return_token_ids: true`, as in vLLM):
chat: top-level `prompt_token_ids`, `choices[].token_ids`; completions: `choices[].prompt_token_ids`,
`choices[].token_ids`. Ours, beside them: `choices[].token_policy_versions` (one per token id). Always:
top-level `policy_version` (the version that produced the response's last token).
"""

import time
import uuid
from dataclasses import dataclass
from typing import Any

from workers.inference.chat import ToolCall, parse_assistant_text
from workers.inference.stream import ChoiceResult, GenerationResult, TokenEvent


@dataclass(frozen=True)
class ResponseOptions:
    model_name: str
    return_token_ids: bool
    return_tokens_as_token_ids: bool
    logprobs: bool
    parse_tool_calls: bool = False


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class TokenText:
    """Token strings as the logprobs fields show them."""

    def __init__(self, engine, as_token_ids: bool):
        self._engine = engine
        self._as_token_ids = as_token_ids

    def __call__(self, token_id: int) -> str:
        return f"token_id:{token_id}" if self._as_token_ids else self._engine.token_text(token_id)

    def chat_entry(self, token_id: int, logprob: float, top: tuple) -> dict:
        entry = self._plain_entry(token_id, logprob)
        entry["top_logprobs"] = [self._plain_entry(candidate, value) for candidate, value in top]
        return entry

    def _plain_entry(self, token_id: int, logprob: float) -> dict:
        text = self(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def completion_logprobs(self, token_ids, logprobs, tops, text_offset: int = 0) -> dict:
        tokens = [self(token_id) for token_id in token_ids]
        offsets = []
        for token in tokens:
            offsets.append(text_offset)
            text_offset += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": list(logprobs),
            "top_logprobs": [{self(candidate): value for candidate, value in top} for top in tops],
            "text_offset": offsets,
        }


def chat_response(
    result: GenerationResult, options: ResponseOptions, token_text: TokenText, version: int
) -> dict:
    choices = [_chat_choice(choice, options, token_text) for choice in result.choices]
    body = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": options.model_name,
        "choices": choices,
        "usage": usage(len(result.prompt_token_ids), sum(len(choice.token_ids) for choice in result.choices)),
        "policy_version": _result_version(result, version),
    }
    if options.return_token_ids:
        body["prompt_token_ids"] = list(result.prompt_token_ids)
    return body


def _chat_choice(choice: ChoiceResult, options: ResponseOptions, token_text: TokenText) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": choice.text}
    finish_reason = choice.finish_reason
    if options.parse_tool_calls:
        reply = parse_assistant_text(choice.text)
        message["content"] = reply.content
        if reply.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in reply.tool_calls]
            finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
    body = {
        "index": choice.index,
        "message": message,
        "logprobs": {
            "content": [
                token_text.chat_entry(token, logprob, top)
                for token, logprob, top in zip(
                    choice.token_ids, choice.logprobs, choice.top_logprobs, strict=True
                )
            ]
        }
        if options.logprobs
        else None,
        "finish_reason": finish_reason,
        "stop_reason": choice.stop_reason,
    }
    if options.return_token_ids:
        body["token_ids"] = list(choice.token_ids)
        body["token_policy_versions"] = list(choice.policy_versions)
    return body


def completion_response(
    results: list[GenerationResult], options: ResponseOptions, token_text: TokenText, version: int
) -> dict:
    choices: list[dict] = []
    for result in results:
        for choice in result.choices:
            body = {
                "index": len(choices),
                "text": choice.text,
                "logprobs": token_text.completion_logprobs(
                    choice.token_ids, choice.logprobs, choice.top_logprobs
                )
                if options.logprobs
                else None,
                "finish_reason": choice.finish_reason,
                "stop_reason": choice.stop_reason,
            }
            if options.return_token_ids:
                body["prompt_token_ids"] = list(result.prompt_token_ids)
                body["token_ids"] = list(choice.token_ids)
                body["token_policy_versions"] = list(choice.policy_versions)
            choices.append(body)
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": options.model_name,
        "choices": choices,
        "usage": usage(
            sum(len(result.prompt_token_ids) for result in results),
            sum(len(choice.token_ids) for result in results for choice in result.choices),
        ),
        "policy_version": max(_result_version(result, version) for result in results),
    }


def _result_version(result: GenerationResult, fallback: int) -> int:
    versions = [choice.policy_versions[-1] for choice in result.choices if choice.policy_versions]
    return max(versions, default=fallback)


def event_token_fields(event: TokenEvent, options: ResponseOptions) -> dict:
    if not options.return_token_ids:
        return {}
    sampled = event.token_id is not None
    return {
        "token_ids": [event.token_id] if sampled else [],
        "token_policy_versions": [event.policy_version] if sampled else [],
    }


def tool_call_deltas(calls: list[ToolCall], first_index: int) -> list[dict]:
    return [call.to_openai(index=first_index + offset) for offset, call in enumerate(calls)]
