"""Models with a production version, learners and the policy's releases, built through the services."""

from apps.audit.services import Actor
from apps.training.models import VersionStatus
from apps.training.services import alias_move, model_version_register

SYSTEM = Actor.system("test")
FIRED = {"drift_js": 0.5, "thumbs_down_rate": 0.1}
CALM = {"drift_js": 0.05, "thumbs_down_rate": 0.1}


def production(tenant, policy, *, checkpoint="/models/base", metrics=None):
    """Version 0 of the policy's model, in production behind the `production` alias."""
    base = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=policy.model,
        checkpoint_path=str(checkpoint),
        tokenizer_hash="tok",
        status=VersionStatus.PRODUCTION,
        metrics=metrics,
    )
    alias_move(tenant=tenant, actor=SYSTEM, name=policy.model, alias="production", version=base)
    return base


def candidate(tenant, base, *, checkpoint="/models/v1", metrics=None):
    return model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=base.name,
        checkpoint_path=str(checkpoint),
        tokenizer_hash="tok",
        parent=base,
        metrics=metrics,
    )
