"""Probing a backend over HTTP. Embedded and vLLM servers answer GET /health; other OpenAI-compatible
servers are probed with GET /v1/models."""

import httpx

from apps.inference.models import BackendKind

PROBE_TIMEOUT_SECONDS = 3.0


def backend_probe(*, base_url: str, kind: str) -> tuple[bool, str]:
    path = "/v1/models" if kind == BackendKind.OPENAI_COMPATIBLE else "/health"
    try:
        response = httpx.get(base_url.rstrip("/") + path, timeout=PROBE_TIMEOUT_SECONDS)
    except httpx.HTTPError as error:
        return False, f"{type(error).__name__}: {error}"[:500]
    if response.status_code != 200:
        return False, f"GET {path} answered {response.status_code}"
    return True, ""
