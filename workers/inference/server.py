"""The embedded OpenAI-compatible server (Starlette) over one InferenceEngine.

    python -m workers.inference.server --model DIR --port 8100 [--host 127.0.0.1]
        [--served-model-name NAME ...] [--model-version V] [--admin-token TOKEN] [--model-store DIR ...]
        [--threads N]

The admin API (/admin/*) always needs `Authorization: Bearer <token>`: the token comes from --admin-token or
the environment variable AREAL_INFERENCE_ADMIN_TOKEN (what `manage.py up` and the demo pass: this server's own
token, apps/inference/admin_tokens.py); a server started with neither refuses every admin call.

`/admin/load` loads only directories inside the model store: the folders given by --model-store (repeatable), else
the environment variable AREAL_INFERENCE_MODEL_STORE (folders separated by the path separator), else the folder
that holds --model (`up` serves var/models/default, so var/models, where trained versions are exported). A path
that is relative, names `..`, resolves outside the store or holds a link that leads out of it answers 403
`outside_model_store` before anything is read.
"""

import argparse
import asyncio
import hmac
import json
import os
import time
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from workers.inference.chat import render_chat_prompt
from workers.inference.engine import CheckpointRefused, ContextLengthError, InferenceEngine
from workers.inference.protocol import (
    ApiError,
    decode_json_body,
    invalid,
    parse_chat_request,
    parse_completion_request,
)
from workers.inference.responses import (
    ResponseOptions,
    TokenText,
    chat_response,
    completion_response,
)
from workers.inference.stream import EngineFailure, GenerationResult, RequestStream
from workers.inference.streaming import ChatChunks, CompletionChunks

ADMIN_TOKEN_ENV = "AREAL_INFERENCE_ADMIN_TOKEN"
MODEL_STORE_ENV = "AREAL_INFERENCE_MODEL_STORE"


def _outside_store(reason: str) -> ApiError:
    return ApiError(
        403,
        f"path {reason}; this server loads only directories inside its model store (--model-store)",
        error_type="permission_error",
        code="outside_model_store",
        param="path",
    )


def store_path(path: str, roots: tuple[Path, ...]) -> Path:
    """`path` resolved, when it is an absolute path without `..` whose directory, and every link inside it, stays
    inside one of `roots` (resolved folders); ApiError 403 otherwise."""
    candidate = Path(path)
    if not candidate.is_absolute():
        raise _outside_store("must be absolute")
    if ".." in candidate.parts:
        raise _outside_store("must not contain '..'")
    resolved = candidate.resolve()

    def inside(target: Path) -> bool:
        return any(target == root or target.is_relative_to(root) for root in roots)

    if not inside(resolved):
        raise _outside_store("is outside the model store")
    for folder, directories, files in os.walk(resolved):
        for name in (*directories, *files):
            entry = Path(folder) / name
            if entry.is_symlink() and not inside(entry.resolve()):
                raise _outside_store("holds a link that leads outside the model store")
    return resolved


class InferenceServer:
    def __init__(
        self,
        engine: InferenceEngine,
        *,
        served_model_names: list[str],
        admin_token: str | None = None,
        model_store=(),
    ):
        self.engine = engine
        self.served_model_names = list(served_model_names)
        self.admin_token = admin_token
        self.model_store = tuple(Path(root).resolve() for root in model_store)

    # ---- OpenAI endpoints --------------------------------------------------------------------------

    async def models(self, request: Request) -> JSONResponse:
        created = int(time.time())
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": created,
                        "owned_by": "areal-web",
                        "root": self.engine.model_dir,
                        "max_model_len": self.engine.max_model_len,
                        "policy_version": self.engine.version,
                    }
                    for name in self.served_model_names
                ],
            }
        )

    async def health(self, request: Request) -> JSONResponse:
        status = self.engine.status()
        return JSONResponse({"status": "ok", "policy_version": status.version, "paused": status.paused})

    async def chat_completions(self, request: Request):
        chat = parse_chat_request(decode_json_body(await request.body()))
        model_name = self._model_name(chat.options.model)
        try:
            prompt = render_chat_prompt(
                self.engine.tokenizer,
                chat.messages,
                tools=chat.tools,
                add_generation_prompt=chat.add_generation_prompt,
                template_kwargs=chat.template_kwargs,
            )
        except Exception as error:  # a template may raise anything on input it does not accept
            raise invalid("messages", f"cannot render the chat template: {error}") from error
        prompt_ids = self.engine.tokenizer.backend_tokenizer.encode(prompt, add_special_tokens=False).ids
        stream = self._submit(prompt_ids, chat.options.params, incremental=chat.options.stream)
        options = ResponseOptions(
            model_name=model_name,
            return_token_ids=chat.options.return_token_ids,
            return_tokens_as_token_ids=chat.options.return_tokens_as_token_ids,
            logprobs=chat.logprobs,
            parse_tool_calls=chat.parse_tool_calls,
        )
        token_text = TokenText(self.engine, chat.options.return_tokens_as_token_ids)
        if chat.options.stream:
            chunks = ChatChunks(stream, options, token_text, chat.options.include_usage)
            return self._event_stream(chunks.generate(), [stream])
        result = await self._result(stream)
        return JSONResponse(chat_response(result, options, token_text, self.engine.version))

    async def completions(self, request: Request):
        completion = parse_completion_request(decode_json_body(await request.body()))
        model_name = self._model_name(completion.options.model)
        backend = self.engine.tokenizer.backend_tokenizer
        streams = []
        try:
            for prompt in completion.prompts:
                ids = backend.encode(prompt).ids if isinstance(prompt, str) else prompt
                streams.append(
                    self._submit(ids, completion.options.params, incremental=completion.options.stream)
                )
        except ApiError:
            for stream in streams:
                self.engine.abort(stream.request_id)
            raise
        options = ResponseOptions(
            model_name=model_name,
            return_token_ids=completion.options.return_token_ids,
            return_tokens_as_token_ids=completion.options.return_tokens_as_token_ids,
            logprobs=completion.logprobs is not None,
        )
        token_text = TokenText(self.engine, completion.options.return_tokens_as_token_ids)
        if completion.options.stream:
            chunks = CompletionChunks(streams, options, token_text, completion.options.include_usage)
            return self._event_stream(chunks.generate(), streams)
        results = [await self._result(stream) for stream in streams]
        return JSONResponse(completion_response(results, options, token_text, self.engine.version))

    def _model_name(self, requested: str | None) -> str:
        if requested is None:
            return self.served_model_names[0]
        if requested not in self.served_model_names:
            raise ApiError(
                404,
                f"The model `{requested}` does not exist. Served: {self.served_model_names}",
                code="model_not_found",
                param="model",
            )
        return requested

    def _submit(self, prompt_ids, params, *, incremental: bool) -> RequestStream:
        try:
            return self.engine.submit(prompt_ids, params, incremental=incremental)
        except ContextLengthError as error:
            raise ApiError(400, str(error), code="context_length_exceeded", param="max_tokens") from error
        except EngineFailure as error:
            raise ApiError(503, str(error), error_type="server_error", code="engine_unavailable") from error
        except ValueError as error:
            raise ApiError(400, str(error), code="invalid_value") from error

    async def _result(self, stream: RequestStream) -> GenerationResult:
        try:
            return await stream.result_async()
        except EngineFailure as error:
            raise ApiError(500, str(error), error_type="server_error", code="generation_failed") from error
        finally:
            if not stream.finished:
                self.engine.abort(stream.request_id)  # the client went away

    def _event_stream(self, chunks, streams: list[RequestStream]) -> StreamingResponse:
        async def server_sent_events():
            try:
                async for chunk in chunks:
                    yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
            except EngineFailure as error:
                failure = ApiError(500, str(error), error_type="server_error", code="generation_failed")
                yield f"data: {json.dumps(failure.body())}\n\n"
            finally:
                for stream in streams:
                    if not stream.finished:
                        self.engine.abort(stream.request_id)
            yield "data: [DONE]\n\n"

        return StreamingResponse(
            server_sent_events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    # ---- administration ---------------------------------------------------------------------------

    async def admin_load(self, request: Request) -> JSONResponse:
        self._authorize(request)
        body = decode_json_body(await request.body())
        path, version = body.get("path"), body.get("version")
        if not isinstance(path, str) or not path:
            raise invalid("path", "must be the path of a model directory")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise invalid("version", "must be an integer")
        recompute_kv = body.get("recompute_kv", True)
        if not isinstance(recompute_kv, bool):
            raise invalid("recompute_kv", "must be true or false")
        checked = store_path(path, self.model_store)
        try:
            report = await asyncio.to_thread(
                self.engine.load_checkpoint, str(checked), version=version, recompute_kv=recompute_kv
            )
        except CheckpointRefused as error:
            code = "tokenizer_mismatch" if error.status == 409 else "invalid_checkpoint"
            raise ApiError(error.status, str(error), code=code, param="path") from error
        return JSONResponse(asdict(report))

    async def admin_pause(self, request: Request) -> JSONResponse:
        self._authorize(request)
        await asyncio.to_thread(self.engine.pause)
        return JSONResponse(asdict(self.engine.status()))

    async def admin_resume(self, request: Request) -> JSONResponse:
        self._authorize(request)
        self.engine.resume()
        return JSONResponse(asdict(self.engine.status()))

    async def admin_version(self, request: Request) -> JSONResponse:
        self._authorize(request)
        return JSONResponse(
            {**asdict(self.engine.status()), "tokenizer_fingerprint": self.engine.tokenizer_fingerprint}
        )

    async def admin_stats(self, request: Request) -> JSONResponse:
        self._authorize(request)
        return JSONResponse(asdict(self.engine.stats()))

    def _authorize(self, request: Request) -> None:
        if not self.admin_token:
            raise ApiError(
                403,
                "the admin API is closed: this server was started without an admin token",
                error_type="permission_error",
                code="admin_api_disabled",
            )
        presented = request.headers.get("authorization", "").encode("latin-1", "replace")
        if not hmac.compare_digest(presented, f"Bearer {self.admin_token}".encode()):
            raise ApiError(
                401,
                "admin endpoints need Authorization: Bearer <admin token>",
                error_type="authentication_error",
                code="invalid_admin_token",
            )


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


async def _api_error_handler(request: Request, error: ApiError) -> JSONResponse:
    return _error_response(error)


async def _http_error_handler(request: Request, error: HTTPException) -> JSONResponse:
    return _error_response(
        ApiError(error.status_code, str(error.detail), code="not_found" if error.status_code == 404 else None)
    )


async def _unexpected_error_handler(request: Request, error: Exception) -> JSONResponse:
    return _error_response(ApiError(500, f"internal error: {error!r}", error_type="server_error"))


def create_app(
    engine: InferenceEngine,
    *,
    served_model_names: list[str] | None = None,
    admin_token: str | None = None,
    model_store=None,
) -> Starlette:
    """The ASGI app. It starts the engine's thread on startup if needed and stops it on shutdown. `model_store`:
    the folders /admin/load may load from (default: the folder holding the engine's model)."""
    server = InferenceServer(
        engine,
        served_model_names=served_model_names or [engine.model_dir],
        admin_token=admin_token,
        model_store=model_store or [Path(engine.model_dir).resolve().parent],
    )

    @asynccontextmanager
    async def lifespan(app):
        if not engine.is_running:
            engine.start()
        yield
        engine.stop()

    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/v1/completions", server.completions, methods=["POST"]),
        Route("/admin/load", server.admin_load, methods=["POST"]),
        Route("/admin/pause", server.admin_pause, methods=["POST"]),
        Route("/admin/resume", server.admin_resume, methods=["POST"]),
        Route("/admin/version", server.admin_version, methods=["GET"]),
        Route("/admin/stats", server.admin_stats, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # Starlette types every handler as taking Exception, though it calls each only with its own class.
        exception_handlers={
            ApiError: _api_error_handler,  # type: ignore[dict-item]
            HTTPException: _http_error_handler,  # type: ignore[dict-item]
            Exception: _unexpected_error_handler,
        },
    )
    app.state.inference = server
    return app


def default_threads() -> int:
    # The embedded default shares its machine with the web process and CPU training workers; torch's
    # spinning thread pool slows down many times over when oversubscribed, so leave half the cores free.
    return max(1, (os.cpu_count() or 2) // 2)


def main(argv=None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(
        description="Embedded OpenAI-compatible inference server (transformers)."
    )
    parser.add_argument("--model", required=True, help="a local Hugging Face model directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument(
        "--served-model-name", nargs="+", help="names clients may use; default: the --model value"
    )
    parser.add_argument("--model-version", type=int, default=0, help="policy version of the initial weights")
    # The server is a process of its own, not a library workers/ callers pass values to: its launcher
    # (areal_web.processes) hands it the admin token and the model store in its environment, kept off the
    # command line that every local user can read.
    parser.add_argument(
        "--admin-token",
        default=os.environ.get(ADMIN_TOKEN_ENV) or None,
        help=f"bearer token required on /admin/* (default: ${ADMIN_TOKEN_ENV}; without one the admin "
        "API refuses every call)",
    )
    parser.add_argument(
        "--model-store",
        action="append",
        metavar="DIR",
        help=f"a folder /admin/load may load from (repeatable; default: ${MODEL_STORE_ENV}, folders separated "
        "by the path separator, else the folder holding --model)",
    )
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, help="default: the model's max_position_embeddings")
    parser.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=16384,
        help="prompt tokens whose keys and values the prefix cache keeps (0: off)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=default_threads(),
        help="torch intra-op threads (default: half the cores, at least 1)",
    )
    arguments = parser.parse_args(argv)
    torch.set_num_threads(arguments.threads)
    engine = InferenceEngine(
        arguments.model,
        version=arguments.model_version,
        max_batch_size=arguments.max_batch_size,
        max_model_len=arguments.max_model_len,
        prefix_cache_tokens=arguments.prefix_cache_tokens,
    )
    store = arguments.model_store or [
        folder for folder in os.environ.get(MODEL_STORE_ENV, "").split(os.pathsep) if folder
    ]
    app = create_app(
        engine,
        served_model_names=arguments.served_model_name or [arguments.model],
        admin_token=arguments.admin_token,
        model_store=store or [Path(arguments.model).resolve().parent],
    )
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level="warning")


if __name__ == "__main__":
    main()
