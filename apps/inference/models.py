from django.db import models
from django.utils import timezone

from apps.core.models import TimestampedTenantOwned
from apps.inference.choices import (  # noqa: F401 (re-exported)
    BackendKind,
    BackendState,
    CapParameter,
)

# The capability flags of a backend: what it returns and which of the gateway's extra parameters it accepts.
CAPABILITY_FIELDS = (
    "returns_token_ids",
    "returns_logprobs",
    "returns_token_versions",
    "accepts_return_token_ids",
)
# What a backend's provider settings hold besides its credential: the flags and the cap field.
PROVIDER_FIELDS = (*CAPABILITY_FIELDS, "cap_parameter")


class InferenceBackend(TimestampedTenantOwned):
    """One server replica (OpenAI-compatible, or Anthropic's Messages API) that serves a model (at a version)
    for a tenant, with its API credential (encrypted, apps/inference/credentials.py) and capability flags."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="inference_backends")
    name = models.SlugField(max_length=64)
    base_url = models.URLField(max_length=300, help_text="Root of the server, e.g. http://10.0.0.5:8100")
    kind = models.CharField(max_length=24, choices=BackendKind.choices)
    served_model = models.CharField(max_length=200, help_text="The model name clients ask for.")
    model_version = models.CharField(max_length=64, blank=True, help_text="Version of that model it serves.")
    reported_version = models.CharField(
        max_length=64, blank=True, help_text="The version the server itself reported at its last check."
    )
    weight = models.PositiveIntegerField(default=1, help_text="Relative share of new sessions; 0 takes none.")
    state = models.CharField(max_length=16, choices=BackendState.choices, default=BackendState.UNKNOWN)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    credential_encrypted = models.TextField(
        blank=True, editable=False, help_text="The API credential, Fernet-encrypted; never shown."
    )
    credential_last4 = models.CharField(max_length=4, blank=True, editable=False)
    credential_updated_at = models.DateTimeField(null=True, blank=True, editable=False)
    returns_token_ids = models.BooleanField(
        default=True, help_text="Answers carry prompt and completion ids."
    )
    returns_logprobs = models.BooleanField(default=True, help_text="Answers carry per-token logprobs.")
    returns_token_versions = models.BooleanField(
        default=True, help_text="Answers carry the policy version of each completion token."
    )
    accepts_return_token_ids = models.BooleanField(
        default=True, help_text="The server accepts the `return_token_ids` request parameter."
    )
    cap_parameter = models.CharField(
        max_length=24,
        choices=CapParameter.choices,
        default=CapParameter.MAX_TOKENS,
        help_text="The field that carries the completion cap of a chat completion sent to the server.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="backend_unique_name")]
        ordering = ["served_model", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.base_url})"

    @property
    def credential_set(self) -> bool:
        return bool(self.credential_encrypted)

    @property
    def returns_token_data(self) -> bool:
        """Whether a step of this backend can carry ATDP tokens (ids and behaviour logprobs)."""
        return self.returns_token_ids and self.returns_logprobs


class SessionAffinity(TimestampedTenantOwned):
    """Which backend a session is pinned to, so multi-turn context and prefix caches stay on one replica."""

    session_id = models.CharField(max_length=200)
    served_model = models.CharField(max_length=200)
    backend = models.ForeignKey(InferenceBackend, on_delete=models.CASCADE, related_name="affinities")
    last_used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "served_model", "session_id"], name="affinity_unique_session"
            )
        ]
        indexes = [models.Index(fields=["backend", "last_used_at"])]

    def __str__(self) -> str:
        return f"{self.session_id} → {self.backend_id}"


class BackendAddressGrant(TimestampedTenantOwned):
    """An address an operator granted to a tenant: the tenant may register backends there (apps/inference/grants.py).
    `address` is a pattern in the syntax of AREAL_BACKEND_ALLOWED_HOSTS entries (HOST:PORT, HOST a name, an
    address or a network, PORT a number or `*`); `public` is not a grant. Written only by the operator's
    commands (`backendgrant`, `registerbackend`)."""

    address = models.CharField(max_length=300)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "address"], name="backend_grant_unique_address")
        ]
        ordering = ["address"]

    def __str__(self) -> str:
        return self.address
