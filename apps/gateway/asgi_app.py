"""The agent-facing gateway: a plain ASGI application in front of Django.

Paths: /v1/chat/completions, /v1/completions, /v1/messages (Anthropic), /v1/models, /v1/rewards,
/rl/start_session, /rl/set_reward, /rl/end_session, the per-session base URL /s/<session_id>/v1/...,
AReaL's un-prefixed /chat/completions, and AReaL's older session-in-the-path form
/v1/<session_id>/{chat/completions, completions, messages, rl/set_reward, rl/end_session}.
Everything else goes to Django (console, REST API).

Per request: authenticate (cached) → parse and validate → policy (scope, model, PII block, rate
limits, budget reservation) → attribute the session → route to a backend (session-affine; a harness-only
version is served by the backends of the version whose weights it uses) → apply the routed version's
harness (apps.evolution) → forward with token ids and logprobs → stream or return the answer (the harness's
tool routing applied to it) → journal the step before the response is released → settle the budget (a
generation request's handling is generation.py). Steps reach the database through the journal's batched
flusher.
"""

import asyncio
import functools
import json
import logging
import uuid
from pathlib import Path

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from apps.core.errors import DATABASE_RETRY_AFTER_SECONDS, DomainError
from apps.gateway import validation, wire_json
from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.forward import backend_session_close
from apps.gateway.fresh_session_routing import (
    candidates_for,
    fresh_session_version,
    remember_fresh_route,
    routes_flush,
)
from apps.gateway.generation import JSON_HEADERS, handle_chat, handle_completions, handle_messages
from apps.gateway.journal import Journal, journal_recover
from apps.gateway.policy import WindowCounter, policy_for
from apps.gateway.principals import authenticate, presented_key
from apps.gateway.recorder import Recorder
from apps.gateway.responses import handle_response_by_id, handle_responses
from apps.gateway.rl import handle_end_session, handle_rewards, handle_set_reward, handle_start_session
from apps.gateway.sessions import SessionIndex, SessionState, loose_prefix_hashes, prefix_hashes
from apps.gateway.single_flight import single_flight
from apps.gateway.versions import ServedVersionsSnapshot

logger = logging.getLogger(__name__)

# The gateway's paths: its prefixes, and at the root the endpoints AReaL's proxy serves there (an agent whose
# base URL is the server's root): every path under them is the gateway's, so an unknown one is a JSON 404.
GATEWAY_PREFIXES = (
    "/v1/",
    "/rl/",
    "/s/",
    "/chat/",
    "/completions",
    "/responses",
    "/messages",
    "/embeddings",
    "/moderations",
)
GATEWAY_EXACT = frozenset({"/v1", "/rl", "/s"})
# The console has pages under /models/: a root /models request is the gateway's when it presents an API key
# (an agent's SDK always does; a browser never does).
KEYED_ROOTS = ("/models",)
# What AReaL's older clients send with the session id right after the base URL (/v1/<session_id>/...).
SESSION_PATH_ROUTES = (
    "/chat/completions",
    "/completions",
    "/messages",
    "/responses",
    "/rl/set_reward",
    "/rl/end_session",
)


def is_gateway_path(scope) -> bool:
    """Whether an HTTP request is the gateway's (the rest is Django's)."""
    path = scope["path"]
    if path.startswith(GATEWAY_PREFIXES) or path in GATEWAY_EXACT:
        return True
    if any(path == root or path.startswith(root + "/") for root in KEYED_ROOTS):
        return bool(presented_key(dict(scope.get("headers") or ())))
    return False


def session_in_path(route: str) -> tuple[str, str] | None:
    """(session id, route) of `/<session_id>/<endpoint>` (the endpoint optionally under /v1), else None."""
    parts = route.split("/", 2)
    if len(parts) < 3 or not parts[1]:
        return None
    rest = "/" + parts[2]
    rest = rest[3:] if rest.startswith("/v1/") else rest
    return (parts[1], rest) if rest in SESSION_PATH_ROUTES else None


MAX_BODY_BYTES = settings.AREAL_GATEWAY_MAX_BODY_BYTES


class Gateway:
    def __init__(self):
        self.sessions = SessionIndex()
        self.counters = WindowCounter()
        self.served_versions = ServedVersionsSnapshot()  # per-token versions for vLLM answers (versions.py)
        self.journal: Journal | None = None
        self.recorder: Recorder | None = None  # the journal's ingestion in a process of its own (recorder.py)
        self._flusher: asyncio.Task | None = None
        self._route_writer: asyncio.Task | None = None
        self._versions_reader: asyncio.Task | None = None

    # lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        directory = Path(settings.VAR_DIR) / "journal"
        await database(journal_recover)(directory)
        if settings.AREAL_GATEWAY_RECORDER == "process":
            self.recorder = Recorder()
            self.recorder.start()
        self.journal = Journal(directory, recorder=self.recorder)
        self._flusher = asyncio.get_running_loop().create_task(self.journal.run_flusher())
        self._route_writer = asyncio.get_running_loop().create_task(self._write_routes())
        self._versions_reader = asyncio.get_running_loop().create_task(self.served_versions.run_refresher())

    async def _write_routes(self) -> None:
        while True:
            await asyncio.sleep(settings.AREAL_JOURNAL_FLUSH_MS / 1000)
            await routes_flush()

    async def stop(self) -> None:
        for task in (self._flusher, self._route_writer, self._versions_reader):
            if task:
                task.cancel()
        await routes_flush()
        if self.journal:
            await self.journal.flush()
            self.journal.close()
        if self.recorder:
            await asyncio.to_thread(self.recorder.close)
        await backend_session_close()

    async def ensure_started(self) -> None:
        if self.journal is None:
            await self.start()

    # dispatch ----------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        await self.ensure_started()
        path = scope["path"]
        session_from_path = None
        if path.startswith("/s/"):
            parts = path.split("/", 3)
            if len(parts) < 4 or not parts[2]:
                return await self._reply(send, GatewayError(404, "use /s/<session_id>/v1/...", "not_found"))
            session_from_path, path = parts[2], "/" + parts[3]
        if path.startswith("/v1/"):
            route = path[3:]
            if session_from_path is None and (scope["method"], route) not in ROUTES:
                session_from_path, route = session_in_path(route) or (None, route)
        elif path.startswith("/rl/"):
            route = path
        else:
            route = path  # AReaL's un-prefixed /chat/completions, /completions
        anthropic = route == "/messages"
        try:
            handler = ROUTES.get((scope["method"], route))
            if handler is None and route.startswith("/responses/") and route.count("/") == 2:
                if scope["method"] not in ("GET", "DELETE"):
                    raise GatewayError(
                        405, f"{scope['method']} is not allowed on {scope['path']}", "method_not_allowed"
                    )
                response_id = route[len("/responses/") :]
                handler = functools.partial(handle_response_by_id, response_id=response_id)
            if handler is None:
                if any(key[1] == route for key in ROUTES):
                    raise GatewayError(
                        405, f"{scope['method']} is not allowed on {scope['path']}", "method_not_allowed"
                    )
                raise GatewayError(404, f"no endpoint {scope['path']}", "not_found")
            headers = dict(scope["headers"])
            if session_from_path and presented_key(headers) == session_from_path:
                raise GatewayError(  # AReaL's oldest client sends the session id as its key
                    401,
                    "a session id is not a key: send the tenant's API key (or the session key from "
                    "/rl/start_session) with the session id in the path",
                    "session_id_not_a_key",
                )
            await handler(self, scope, receive, send, headers, session_from_path)
        except GatewayError as error:
            await self._reply(send, error, anthropic=anthropic)
        except DomainError as error:
            await self._reply(
                send, GatewayError(error.status, error.message, error.code), anthropic=anthropic
            )
        except (OperationalError, InterfaceError):  # the database is down or restarting: worth a retry
            logger.warning(
                "gateway request on %s failed: the database is unavailable", scope["path"], exc_info=True
            )
            await self._reply(
                send,
                GatewayError(
                    503,
                    "the gateway cannot reach its database; retry shortly",
                    "database_unavailable",
                    retry_after=DATABASE_RETRY_AFTER_SECONDS,
                ),
                anthropic=anthropic,
            )
        except Exception:
            logger.exception("gateway failure on %s", scope["path"])
            await self._reply(
                send, GatewayError(500, "internal gateway error", "internal_error"), anthropic=anthropic
            )

    async def _reply(self, send, error: GatewayError, *, anthropic: bool = False) -> None:
        body = error.anthropic_body() if anthropic else error.openai_body()
        headers = list(JSON_HEADERS)
        if error.retry_after is not None:
            headers.append((b"retry-after", str(error.retry_after).encode()))
        try:
            await send({"type": "http.response.start", "status": error.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        except Exception:  # the client is gone
            pass

    # shared steps ------------------------------------------------------------------------------------
    async def read_json(self, receive, *, allow_empty: bool = False) -> dict:
        """The request's JSON object (400 otherwise); with `allow_empty`, an empty body is {}."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise GatewayError(400, "client disconnected", "client_disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise GatewayError(413, f"request body exceeds {MAX_BODY_BYTES} bytes", "payload_too_large")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        too_deep = GatewayError(
            400,
            f"the JSON body is nested too deeply (at most {validation.MAX_JSON_DEPTH} levels)",
            "invalid_json",
        )
        raw = b"".join(chunks)
        if allow_empty and not raw.strip():
            return {}
        try:
            body = json.loads(raw or b"null", parse_constant=wire_json.parse_constant)
        except (ValueError, UnicodeDecodeError) as error:
            raise GatewayError(400, f"malformed JSON body: {error}", "invalid_json") from None
        except RecursionError:
            raise too_deep from None
        if not isinstance(body, dict):
            raise GatewayError(400, "the request body must be a JSON object", "invalid_json")
        if validation.body_nesting_exceeds(raw, body):
            raise too_deep
        return body

    async def authorize(self, headers, scope_needed: str):
        principal, raw = await authenticate(headers)
        if scope_needed not in principal.scopes:
            raise GatewayError(403, f"this API key lacks the {scope_needed!r} scope", "scope_missing")
        return principal, raw

    async def attribute_session(
        self, principal, headers, session_from_path, messages
    ) -> tuple[SessionState, list[str], bool, str | None]:
        """(the session's state with its shared cursor, message-prefix hashes, whether this request minted the
        session, the loose hash of the messages: sessions.py's loose form); at most one read of the shared
        session state (sessions.py)."""
        hashes = prefix_hashes(messages) if messages is not None else []
        loose = loose_prefix_hashes(messages) if messages else []
        loose_prompt = loose[-1] if loose else None
        session_id = (
            principal.session_id
            or headers.get(b"x-session-id", b"").decode("utf-8", "replace").strip()
            or session_from_path
        )
        if session_id:
            if len(session_id) > 200:
                raise GatewayError(400, "session ids are at most 200 characters", "invalid_session_id")
            return await self.sessions.resume(principal.tenant_id, session_id), hashes, False, loose_prompt
        if hashes:
            continued = await self.sessions.continue_by_prefix(
                principal.tenant_id, principal.key_prefix, messages, hashes, loose
            )
            if continued is not None:
                return continued, hashes, False, loose_prompt
        minted = self.sessions.get(principal.tenant_id, "auto-" + uuid.uuid4().hex)
        return minted, hashes, True, loose_prompt

    async def route(self, principal, model: str, state, *, minted: bool = False):
        from apps.inference.choices import BackendState
        from apps.inference.selectors import backend_list
        from apps.inference.services import NoBackendAvailable, backend_for_session
        from apps.releases.version_routing import (
            MISSING,
            routing_plan,
            routing_plan_cached,
            routing_version_for_session,
        )

        # The release routing (canary split) decides the version; a session keeps its backend while the plan
        # still serves that backend's version, and moves on its next request when it no longer does (rollback).
        plan = routing_plan_cached(tenant_id=principal.tenant_id, model=model)
        if plan is MISSING:
            plan = await single_flight(
                ("plan", principal.tenant_id, model),
                lambda: database(routing_plan)(tenant_id=principal.tenant_id, model=model),
            )
        backend = state.backend
        if (
            backend is not None
            and backend.served_model == model
            and getattr(backend, "healthy", True)
            and (plan is None or plan.allows(state.version or backend.model_version))
        ):
            return backend
        tenant_id = principal.tenant_id
        if minted:  # a session created by this request: nothing to read (fresh_session_routing.py)
            version = fresh_session_version(tenant_id=tenant_id, session_id=state.session_id, plan=plan)
            snapshot = await candidates_for(
                tenant_id=tenant_id,
                model=model,
                version=(await self.serving(tenant_id, model, version)).backend_version if version else None,
                load=database,
            )
            if snapshot.backends:
                backend = state.backend = snapshot.pick()
                state.version = version or backend.model_version
                remember_fresh_route(
                    tenant_id=tenant_id,
                    model=model,
                    session_id=state.session_id,
                    backend_id=backend.pk,
                    plan=plan,
                )
                return backend

        def choose():
            from apps.evolution.harness_versions import version_serving
            from apps.tenants.models import Tenant

            tenant = Tenant.objects.get(pk=tenant_id)
            version = routing_version_for_session(
                tenant_id=tenant_id, model=model, session_id=state.session_id, plan=plan
            )
            # a harness-only version is served by the backends of the version whose weights it uses
            backend_version = (
                version_serving(tenant_id=tenant_id, model=model, number=version).backend_version
                if version
                else None
            )
            try:
                chosen = backend_for_session(
                    tenant=tenant,
                    served_model=model,
                    session_id=state.session_id,
                    model_version=backend_version,
                )
            except NoBackendAvailable:
                if not backend_list(tenant=tenant, served_model=model).exists():
                    raise GatewayError(
                        404,
                        f"the model {model!r} does not exist or is not served for this tenant",
                        "model_not_found",
                    ) from None
                raise GatewayError(
                    503,
                    f"no healthy backend serves {model!r} right now",
                    "no_backend_available",
                    retry_after=5,
                ) from None
            return chosen, version

        backend, version = await database(choose)()
        if backend.state != BackendState.UP:
            raise GatewayError(503, f"no healthy backend serves {model!r} right now", "no_backend_available")
        state.backend, state.version = backend, version or backend.model_version
        return backend

    async def serving(self, tenant_id: int, model: str, version: str | None):
        """How the routed `version` is served (its backends' version, its harness), from the per-process
        map of apps.evolution.harness_versions; read from the database at most once per routing-cache period."""
        from apps.evolution.harness_versions import VersionServing, version_serving, version_serving_cached

        if not version:
            return VersionServing(backend_version=version or "", harness=None)
        cached = version_serving_cached(tenant_id=tenant_id, model=model, number=version)
        if cached is not None:
            return cached
        return await single_flight(
            ("serving", tenant_id, model, version),
            lambda: database(version_serving)(tenant_id=tenant_id, model=model, number=version),
        )


async def handle_models(gateway, scope, receive, send, headers, session_from_path):
    principal, _ = await gateway.authorize(headers, "inference")

    def models():
        from apps.inference.selectors import served_models
        from apps.tenants.models import Tenant

        return served_models(tenant=Tenant.objects.get(pk=principal.tenant_id))

    policy = await policy_for(principal.tenant_id)
    created = int(timezone.now().timestamp())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": principal.tenant_slug}
        for name in await database(models)()
        if policy.allows(name)
    ]
    await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": json.dumps({"object": "list", "data": data}).encode()})


ROUTES = {
    ("POST", "/chat/completions"): handle_chat,
    ("POST", "/completions"): handle_completions,
    ("POST", "/messages"): handle_messages,
    ("POST", "/responses"): handle_responses,
    ("GET", "/models"): handle_models,
    ("POST", "/rewards"): handle_rewards,
    ("POST", "/rl/start_session"): handle_start_session,
    ("POST", "/rl/set_reward"): handle_set_reward,
    ("POST", "/rl/end_session"): handle_end_session,
}


def with_gateway(django_application):
    """The outer ASGI application: gateway paths to the gateway, the rest to Django; lifespan starts the
    journal flusher (recovering journals of dead processes first) and flushes it on shutdown."""
    gateway = Gateway()

    async def application(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        await gateway.start()
                        await send({"type": "lifespan.startup.complete"})
                    except Exception as error:
                        await send({"type": "lifespan.startup.failed", "message": str(error)})
                        return None
                elif message["type"] == "lifespan.shutdown":
                    await gateway.stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return None
        if scope["type"] == "http" and is_gateway_path(scope):
            return await gateway(scope, receive, send)
        return await django_application(scope, receive, send)

    application.gateway = gateway
    return application
