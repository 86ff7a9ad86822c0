from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.core.models import TenantOwned, TimestampedTenantOwned
from apps.tenants.permissions import Role


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug


class ConsentMode(models.TextChoices):
    FULL = "full", "Full: store content and tokens"
    METADATA_ONLY = "metadata_only", "Metadata only: cost and versions"
    NONE = "none", "None: forward, store nothing"


class PiiMode(models.TextChoices):
    REDACT = "redact", "Redact before storing"
    BLOCK = "block", "Refuse requests containing PII"
    OFF = "off", "Off"


MAX_SESSION_IDLE_SECONDS = 30 * 24 * 3600


class TenantPolicy(TenantOwned):
    """What a tenant allows: models, limits, budget, data collection, PII handling and governance."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="policy")
    allowed_models = models.JSONField(default=list, blank=True, help_text="Empty list: every model.")
    rate_limit_rpm = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_tpm = models.PositiveIntegerField(null=True, blank=True)
    monthly_budget_usd = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    consent_mode = models.CharField(max_length=16, choices=ConsentMode.choices, default=ConsentMode.FULL)
    retention_days = models.PositiveIntegerField(default=90)
    pii_mode = models.CharField(max_length=8, choices=PiiMode.choices, default=PiiMode.REDACT)
    price_table = models.JSONField(
        default=dict,
        blank=True,
        help_text='Per model: {"model": {"prompt_per_1k": 0.1, "completion_per_1k": 0.2}} in USD.',
    )
    pii_patterns = models.JSONField(
        default=list,
        blank=True,
        help_text='Tenant-defined PII patterns: [{"name": "order_id", "regex": "ORD-\\d+"}].',
    )
    late_reward_hours = models.PositiveIntegerField(
        default=168,
        help_text="Rewards for a session still bind this many hours after it ended; later ones are refused.",
    )
    session_idle_seconds = models.PositiveIntegerField(
        default=600,
        help_text="An open session with no step for this many seconds is closed (0: never by idleness).",
    )
    review_required = models.BooleanField(default=False)
    two_person_promotion = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"policy of {self.tenant_id}"


class Membership(TimestampedTenantOwned):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user_id} as {self.role} in {self.tenant_id}"


class ApiKey(TimestampedTenantOwned):
    """A machine credential. Only a SHA-256 hash of the secret is stored, with a visible prefix."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=120)
    prefix = models.CharField(max_length=16, unique=True)
    hashed_secret = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A key made (or rotated) by another key: the person behind it is that key's person
    # (selectors.person_behind), so a key cannot launder who holds it.
    created_by_key = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    replaced_by = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaces"
    )
    grace_until = models.DateTimeField(null=True, blank=True, help_text="After rotation: valid until then.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="apikey_unique_name")]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def status_at(self, moment) -> str:
        if self.revoked_at and self.revoked_at <= moment:
            return "revoked"
        if self.grace_until and self.grace_until <= moment:
            return "rotated"
        if self.expires_at and self.expires_at <= moment:
            return "expired"
        if self.grace_until:
            return "rotating"
        return "active"
