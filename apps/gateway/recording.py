"""Turning one forwarded call into an ATDP step record (`StepDraft`); step_journal.py journals it.

Consent `none`: nothing is stored. `metadata_only`: cost, timing and versions, no content or tokens.
PII mode `redact`: stored text is redacted and the step lists the entity types; because token ids
would still encode the original text, a redacted step keeps no token arrays (it is excluded from
token-level training, as ATDP.md allows). `block` refuses the request with 422 before forwarding.

The scan is bounded (`AREAL_PII_MAX_SCAN_CHARS`, `AREAL_PII_PATTERN_TIMEOUT_MS`) and fails closed: what
could not be scanned refuses the request under `block` (422 `pii_unscannable`) and is stored as
``[REDACTED:unscanned]`` under `redact`. A scan of more than `INLINE_SCAN_CHARS` characters (pii_scans.py)
runs in a small thread pool, never on the event loop; a tenant pattern that no longer compiles refuses the
request (422 `pii_policy_invalid`) rather than letting it through unscanned.
"""

import time
import uuid
from dataclasses import dataclass, field

from django.utils import timezone

from apps.gateway.errors import GatewayError
from apps.gateway.pii_scans import off_the_loop, policy_scanner, request_scan
from workers.inference.client import parse_response, parse_stream
from workers.pii import UNSCANNED

PURPOSES = {"production", "eval", "replay", "annotation"}
PARAM_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stop",
    "seed",
    "tool_choice",
    "stream",
    "presence_penalty",
    "frequency_penalty",
)


def _session_end_requested(headers) -> bool:
    """`X-Session-End`: true or 1 ends the session once this request's step is stored; false, 0 or absent
    does not; anything else is a 400 before the request is forwarded."""
    value = headers.get(b"x-session-end", b"").decode("latin-1").strip().lower()
    if value in ("", "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise GatewayError(
        400, "X-Session-End must be true or 1 (or false or 0)", "invalid_request", field="X-Session-End"
    )


@dataclass
class StepDraft:
    principal: object
    policy: object
    endpoint: str
    request: dict
    purpose: str
    agent_name: str
    agent_version: str
    task_id: str
    state_header: dict
    step_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created_at: object = field(default_factory=timezone.now)
    session: object = None
    session_id: str = ""
    prompt_hash: str | None = None
    loose_prompt_hash: str | None = (
        None  # the prompt's loose form (sessions.py): system out, whitespace collapsed
    )
    backend: object = None
    backend_profile: object = None  # apps.gateway.providers.BackendProfile: what the backend returns
    routed_version: str = ""  # the routed model version (a harness-only one differs from its backend's)
    parsed: object = None
    chunks: list = field(default_factory=list)
    ttft_ms: float | None = None
    latency_ms: float = 0.0
    aborted: bool = False
    stream_error_sent: bool = False  # a backend error event mid-stream was relayed to the client
    error: str = ""
    cost_usd: float = 0.0
    pii_entities: tuple = ()
    recorded: bool = False
    end_session: bool = False  # X-Session-End: end the session once this step is stored
    reply_message: dict | None = None
    observation_scan: tuple | None = None  # (redacted observation, entity types), under PII mode `redact`
    action_scan: tuple | None = None
    forwarded_at: float = 0.0  # wall clock: the request left for the backend
    answered_at: float = 0.0  # wall clock: the whole answer, or the stream's end, was received
    token_arrivals: list = field(default_factory=list)  # (wall clock, first choice's tokens) per chunk
    token_versions: object = None  # workers.inference.swaps.TokenVersions, derived (apps/gateway/versions.py)

    @classmethod
    def begin(cls, *, principal, policy, endpoint, request, headers) -> "StepDraft":
        purpose = headers.get(b"x-areal-purpose", b"production").decode("latin-1").strip() or "production"
        if purpose not in PURPOSES:
            raise GatewayError(
                400, f"X-Areal-Purpose must be one of {', '.join(sorted(PURPOSES))}", "invalid_purpose"
            )
        return cls(
            principal=principal,
            policy=policy,
            endpoint=endpoint,
            request=request,
            purpose=purpose,
            agent_name=headers.get(b"x-agent-name", b"").decode("utf-8", "replace")[:200],
            agent_version=headers.get(b"x-agent-version", b"").decode("utf-8", "replace")[:64],
            task_id=(principal.task_id or headers.get(b"x-task-id", b"").decode("utf-8", "replace"))[:200],
            state_header={"prompt_version": headers.get(b"x-prompt-version", b"").decode("utf-8", "replace")}
            if headers.get(b"x-prompt-version")
            else {},
            end_session=_session_end_requested(headers),
        )

    async def sanitize_request(self) -> None:
        """Before forwarding: under `block`, refuses a request with findings (or one that could not be
        scanned); under `redact`, scans now what the step will store of the request."""
        mode = self.policy.pii_mode
        if mode not in ("block", "redact"):
            return
        scanner = policy_scanner(self.policy)
        if mode == "redact":
            if self.policy.consent_mode not in ("none", "metadata_only"):
                self.observation_scan = await request_scan(self.policy, scanner, self._observation())
            return
        content = (
            self.request.get("messages") if self.endpoint != "completions" else self.request.get("prompt")
        )
        _, entities = await request_scan(self.policy, scanner, content)
        if UNSCANNED in entities:
            raise GatewayError(
                422,
                "the request could not be scanned for personal data (it is too large, or a "
                "PII pattern of this tenant took too long); this tenant's policy blocks "
                "such requests",
                "pii_unscannable",
            )
        if entities:
            raise GatewayError(
                422,
                f"the request contains personal data or secrets ({', '.join(entities)}); this "
                "tenant's policy blocks such requests",
                "pii_blocked",
            )

    async def sanitize_response(self) -> None:
        """Under `redact`, scans what the step will store of the answer, off the event loop when large."""
        if self.policy.pii_mode == "redact" and self.policy.consent_mode not in ("none", "metadata_only"):
            self.action_scan = await off_the_loop(policy_scanner(self.policy).scan_value, self._action())

    def attach(self, *, session, prompt_hash, backend, version: str | None = None) -> None:
        self.session, self.session_id, self.prompt_hash, self.backend = (
            session,
            session.session_id,
            prompt_hash,
            backend,
        )
        self.routed_version = version or ""

    async def apply_harness(self, *, request: dict, label: str, tool_versions: dict) -> None:
        """The routed version's harness was applied: the step keeps what the model sees (`request`, scanned
        again under PII mode `redact`), `state.prompt_version` = the harness label (the agent's own
        X-Prompt-Version, if any, is kept as `state.agent_prompt_version`) and `state.tool_versions`."""
        self.request = request
        state = {"prompt_version": label}
        if self.state_header.get("prompt_version"):
            state["agent_prompt_version"] = self.state_header["prompt_version"]
        if tool_versions:
            state["tool_versions"] = dict(tool_versions)
        self.state_header = state
        if self.observation_scan is not None:
            self.observation_scan = None
            await self.sanitize_request()

    def agent_reply(self, harness) -> None:
        """The reply as the agent received it (routed tools renamed), for the session's conversation hash:
        the agent's next request carries it in its history."""
        from workers.evolution.harness import rewrite_message

        if self.reply_message is not None:
            self.reply_message = rewrite_message(self.reply_message, harness)

    def response_id(self, *, anthropic: bool = False) -> str:
        return ("msg_" if anthropic else "") + self.step_id

    # outcomes ----------------------------------------------------------------------------------------
    def complete_unary(self, payload: dict, *, latency_ms: float) -> None:
        self.answered_at = time.time()
        self.parsed = parse_response(payload)
        self.latency_ms = latency_ms
        self._price()

    def add_chunk(self, chunk: dict, *, elapsed_ms: float) -> None:
        if self.ttft_ms is None and chunk.get("choices"):
            self.ttft_ms = elapsed_ms
        self.chunks.append(chunk)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0 and choice.get("token_ids"):
                self.token_arrivals.append((time.time(), len(choice["token_ids"])))

    def finish_stream(self, *, latency_ms: float) -> None:
        self.answered_at = time.time()
        self.latency_ms = latency_ms
        if self.chunks:
            self.parsed = parse_stream(self.chunks)
        self._price()

    def abort(self, reason: str) -> None:
        self.aborted, self.error = True, reason

    def fail(self, reason: str) -> None:
        self.aborted, self.error = True, reason

    def _price(self) -> None:
        prompt, completion = self._token_counts()
        self.cost_usd = self.policy.price(self.request.get("model", ""), prompt, completion)

    def _token_counts(self) -> tuple[int, int]:
        if self.parsed is None:
            return 0, 0
        usage = self.parsed.usage or {}
        prompt = usage.get("prompt_tokens") or len(self.parsed.prompt_token_ids or ())
        completion = usage.get("completion_tokens") or sum(
            len(choice.completion_token_ids or ()) for choice in self.parsed.choices
        )
        return prompt, completion

    # the record --------------------------------------------------------------------------------------
    def _action(self) -> dict:
        if self.parsed is None or not self.parsed.choices:
            return {}
        first = self.parsed.choices[0]
        calls = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in first.tool_calls
        ]
        self.reply_message = {"role": "assistant", "content": first.text or "", "tool_calls": calls or None}
        action = {
            "message": {"role": "assistant", "content": first.text, "tool_calls": calls or None},
            "tool_calls": calls,
            "text": first.text,
        }
        if len(self.parsed.choices) > 1:
            action["alternatives"] = [choice.text for choice in self.parsed.choices[1:]]
        return action

    def _tokens(self) -> dict | None:
        parsed = self.parsed
        if parsed is None or not parsed.choices:
            return None
        profile = self.backend_profile
        if profile is not None and not profile.returns_token_data:
            return None  # text-only: what such a backend sends as ids is not trusted (see _text_only)
        first = parsed.choices[0]
        prompt_ids = parsed.prompt_token_ids or first.prompt_token_ids
        if prompt_ids is None or first.completion_token_ids is None or first.logprobs is None:
            return None
        per_token = first.policy_versions if profile is None or profile.returns_token_versions else None
        if per_token is not None:
            versions = per_token
        elif self.token_versions is not None:  # derived from the backend's served version and swaps
            versions = self.token_versions.versions
        else:
            versions = [parsed.policy_version if parsed.policy_version is not None else -1] * len(
                first.completion_token_ids
            )
        return {
            "prompt_ids": list(prompt_ids),
            "completion_ids": list(first.completion_token_ids),
            "completion_logprobs": list(first.logprobs),
            "completion_versions": list(versions),
        }

    def _model_version(self) -> str:
        """The routed version (a harness-only version is served by another version's backends but recorded
        under its own number); else the backend row's version; for a row registered without one, the version
        the server reported: in this answer (the embedded server's `policy_version`) or at its last check
        (vLLM's weight version)."""
        if self.routed_version:
            return self.routed_version
        if getattr(self.backend, "model_version", ""):
            return self.backend.model_version
        if self.parsed is not None and self.parsed.policy_version is not None:
            return str(self.parsed.policy_version)
        return getattr(self.backend, "reported_version", "") or ""

    def _policy_version(self) -> int | None:
        """The version of the answer's last token: the server's, else the derived one when known."""
        if self.parsed is None:
            return None
        if self.parsed.policy_version is not None:
            return self.parsed.policy_version
        derived = self.token_versions.versions if self.token_versions is not None else ()
        return derived[-1] if derived and derived[-1] >= 0 else None

    def _observation(self) -> dict:
        return {
            "messages": self.request.get("messages"),
            "prompt": self.request.get("prompt"),
            "tools": self.request.get("tools"),
            "params": {key: self.request[key] for key in PARAM_FIELDS if key in self.request},
        }

    def _text_only(self, tokens, entities) -> bool:
        """An answer came back without token data (a hosted API, an Anthropic upstream, a server that
        returns no ids or logprobs): ATDP's `retokenized` with no token arrays. Usable for SFT once whoever
        trains tokenizes its text; never an on-policy sample (qualification's `token_data_complete` fails,
        and the training view leaves it out). A redacted step's missing ids are PII's, not this."""
        answered = self.parsed is not None and bool(self.parsed.choices)
        return tokens is None and not entities and answered

    def to_record(self) -> dict | None:
        consent = self.policy.consent_mode
        if consent == "none":
            return None
        prompt_tokens, completion_tokens = self._token_counts()
        first = self.parsed.choices[0] if self.parsed is not None and self.parsed.choices else None
        record = {
            "step_id": self.step_id,
            "tenant_id": self.principal.tenant_id,
            "session_id": self.session_id,
            "api_key_prefix": self.principal.key_prefix,
            "task_id": self.task_id,
            "group_id": self.principal.group_id or (self.session.group_id if self.session else ""),
            "purpose": self.purpose,
            "consent": consent,
            "agent_name": self.agent_name,
            "agent_version": self.agent_version,
            "created_at": self.created_at.isoformat(),
            "retention_until": self.policy.retention_until().isoformat(),
            "parent_step_id": self.session.last_step_id if self.session else None,
            "retry_of": None,
            "kind": "llm_call",
            "endpoint": self.endpoint,
            "served_model": self.request.get("model", ""),
            "model_version": self._model_version(),
            "policy_version": self._policy_version(),
            "backend_name": getattr(self.backend, "name", "") or "",
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "latency_ms": int(self.latency_ms),
            "ttft_ms": int(self.ttft_ms) if self.ttft_ms is not None else None,
            "cost_usd": round(self.cost_usd, 6),
            "scopes": list(self.principal.scopes),
            "aborted": self.aborted,
            "error": self.error[:500],
            "result": {"finish_reason": first.finish_reason if first else None, "error": self.error or None},
        }
        if (
            self.session is not None
            and self.prompt_hash is not None
            and self.prompt_hash == self.session.last_prompt_hash
        ):
            record["retry_of"] = self.session.last_step_id
            record["parent_step_id"] = self.session.last_parent_id
        if consent == "metadata_only":
            record.update(observation={}, action={}, state={}, pii_entities=[])
            return record
        observation = self._observation()
        action = self._action()
        tokens = self._tokens()
        entities: tuple = ()
        if self.policy.pii_mode == "redact":
            # scanned off the event loop by sanitize_request and sanitize_response; replays scan here
            observation, found_in = self.observation_scan or policy_scanner(self.policy).scan_value(
                observation
            )
            action, found_out = self.action_scan or policy_scanner(self.policy).scan_value(action)
            entities = tuple(sorted(set(found_in) | set(found_out)))
            if entities:
                tokens = None  # the ids would still encode what was redacted
        self.pii_entities = entities
        state = self.state_header
        if tokens is not None and self.token_versions is not None:
            from apps.gateway.versions import version_note

            state = {**state, "token_versions": version_note(self.token_versions, record["backend_name"])}
        record.update(
            observation=observation,
            action=action,
            state=state,
            pii_entities=list(entities),
            retokenized=self._text_only(tokens, entities),
            tokens=tokens,
            tokenizer=getattr(self.backend, "served_model", "") if tokens else "",
        )
        return record
