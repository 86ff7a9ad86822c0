"""The admin token of each embedded inference server: its own, so that one server's token opens no other.

A server's token is HMAC-SHA256, under the installation's AREAL_INFERENCE_ADMIN_SECRET (a secret of its own, not
derived from any other), of the server's HOST:PORT as its backend URL names it (the host lowercased). `manage.py
up` and the demo start each embedded server with its token (AREAL_INFERENCE_ADMIN_TOKEN in that process only);
publication (apps/training/publication.py) sends a backend the token of the server its URL names, and only to
addresses an operator listed. For a server started by hand: `manage.py backendgrant TENANT HOST:PORT
--print-admin-token`.
"""

import hashlib
import hmac

from django.conf import settings

from apps.inference.egress import url_parts

_PURPOSE = b"areal-inference-admin-token:"


def inference_admin_token(base_url: str) -> str:
    """The admin token of the server at `base_url` (only its host and port count). Raises
    BackendAddressRefused for a malformed URL."""
    host, port = url_parts(base_url)
    server = f"{host.lower().rstrip('.')}:{port}".encode()
    return hmac.new(
        settings.AREAL_INFERENCE_ADMIN_SECRET.encode(), _PURPOSE + server, hashlib.sha256
    ).hexdigest()
