"""Probing a backend over HTTP. Embedded and vLLM servers answer GET /health; other OpenAI-compatible
servers and the Anthropic Messages API are probed with GET /v1/models, with the backend's credential
(`headers`, from apps/inference/credentials.py), since a hosted API answers nothing without one.

The address is checked before any connection (egress.py) and no redirect is followed. What a tenant sees of a
failed probe is one generic sentence (so a probe cannot tell a closed port from a silent one, nor show a
banner); the details go to the server log. A healthy probe also asks the server which version it serves:
the embedded server's /health says `policy_version`, vLLM's GET /weight_info says `weight_version` (when the
server runs with VLLM_SERVER_DEV_MODE, as publication needs)."""

import logging
from typing import NamedTuple

import httpx

from apps.inference.egress import BackendAddressRefused, backend_http_client
from apps.inference.models import BackendKind

logger = logging.getLogger(__name__)
PROBE_TIMEOUT_SECONDS = 3.0
UNREACHABLE = "the backend did not answer its health check"


class Probe(NamedTuple):
    healthy: bool
    error: str = ""
    version: str | None = None  # None: the server did not say


def backend_probe(*, base_url: str, kind: str, headers: dict | None = None) -> Probe:
    path = "/health" if kind in (BackendKind.EMBEDDED, BackendKind.VLLM) else "/v1/models"
    root = base_url.rstrip("/")
    try:
        with backend_http_client(timeout=PROBE_TIMEOUT_SECONDS, headers=headers) as client:
            response = client.get(root + path)
            if response.status_code != 200:
                logger.warning("backend %s: GET %s answered %s", root, path, response.status_code)
                return Probe(False, UNREACHABLE)
            return Probe(True, "", _reported_version(client, root, kind, response))
    except BackendAddressRefused as error:
        return Probe(False, error.message)
    except httpx.HTTPError as error:
        logger.warning("backend %s: GET %s failed: %s: %s", root, path, type(error).__name__, error)
        return Probe(False, UNREACHABLE)


def _reported_version(client: httpx.Client, root: str, kind: str, health: httpx.Response) -> str | None:
    try:
        if kind == BackendKind.EMBEDDED:
            version = health.json().get("policy_version")
        elif kind == BackendKind.VLLM:
            response = client.get(root + "/weight_info")
            version = response.json().get("weight_version") if response.status_code == 200 else None
        else:
            return None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return None if version is None else str(version)
