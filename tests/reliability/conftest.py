from tests.gateway.conftest import (  # noqa: F401  (fixtures)
    agent_key,
    backend,
    default_model_dir,
    embedded_backend_url,
    gateway,
)
