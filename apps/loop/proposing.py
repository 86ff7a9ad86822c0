"""The model proposer's completions: a harness proposal asks a model THROUGH THE GATEWAY, as the tenant's own
eval traffic (a session key minted per call, forgotten after it), so it spans the gateway and evolution."""

import secrets
from collections.abc import Callable

from django.conf import settings

from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant

PROPOSER_AGENT = "areal-harness-proposer"


def model_complete(
    *, tenant: Tenant, model: str, max_tokens: int = 1024, timeout: float = 60.0
) -> Callable[[list[dict]], str]:
    """A `complete(messages) -> text` for `ModelProposer`: one chat completion THROUGH THE GATEWAY, as the
    tenant's own traffic, the way the LLM judge calls it (apps/loop/judging.py): per call a session key of
    the tenant (scope `inference`, key prefix `harness`) minted and forgotten after it, `X-Areal-Purpose: eval`
    and `X-Agent-Name: areal-harness-proposer`, at AREAL_GATEWAY_URL. So the call passes the tenant's model
    allow-list, rate limits and monthly budget, is priced and recorded (an eval trajectory: never trained on,
    and not the production traffic the control plane reads), and the gateway picks, checks and authenticates
    the backend. A refusal raises ValidationFailed `proposer_call_failed` naming the gateway's code; an
    unreachable gateway raises httpx.HTTPError (`harness_run` fails the decision with either)."""
    import httpx

    from apps.core.shared_state import SharedStateUnavailable
    from apps.gateway.principals import Principal, session_key_forget, session_key_mint

    principal = Principal(
        tenant_id=tenant.pk, tenant_slug=tenant.slug, key_prefix="harness", scopes=("inference",)
    )

    def complete(messages: list[dict]) -> str:
        session_id = f"harness-proposer-{secrets.token_hex(8)}"
        try:
            key = session_key_mint(principal=principal, session_id=session_id, task_id="", group_id="")
        except SharedStateUnavailable as error:
            raise ValidationFailed(
                f"the proposer's session key could not be recorded: {error}", code="proposer_call_failed"
            ) from None
        headers = {
            "Authorization": f"Bearer {key}",
            "X-Areal-Purpose": "eval",
            "X-Agent-Name": PROPOSER_AGENT,
        }
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
        try:
            with httpx.Client(base_url=settings.AREAL_GATEWAY_URL.rstrip("/"), timeout=timeout) as client:
                response = client.post("/v1/chat/completions", json=body, headers=headers)
        finally:
            session_key_forget(key)
        if response.status_code != 200:
            raise ValidationFailed(_gateway_refusal(response), code="proposer_call_failed")
        try:
            choices = response.json().get("choices") or [{}]
            return (choices[0].get("message") or {}).get("content") or ""
        except (ValueError, AttributeError, IndexError, TypeError):
            raise ValidationFailed(
                "the gateway's answer is not a chat completion", code="proposer_call_failed"
            ) from None

    return complete


def _gateway_refusal(response) -> str:
    try:
        error = response.json()["error"]
        return f"the gateway answered {response.status_code} {error.get('code')}: {error.get('message')}"[
            :500
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"the gateway answered {response.status_code}"
