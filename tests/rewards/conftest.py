"""The gateway served by uvicorn, for the reward tests that go through it."""

from tests.gateway.conftest import gateway, gateway_url  # noqa: F401  (fixtures)
