"""The overview's outcome points: each tenant's reward mean and success rate of the current minute, published on
its "overview.outcomes" stream by the `metrics.overview_tick` task on a worker; the console's overview
(apps.loop.overview) draws the minutes before and appends these."""

from django.utils import timezone

from apps.metrics.publish import OUTCOMES_STREAM, chart_time, metrics_publish
from apps.rewards import selectors as rewards
from apps.tenants.selectors import tenant_list_all


def outcomes_publish(*, tenant) -> dict | None:
    """Publishes the tenant's current-minute outcome point (None when no reward arrived this minute)."""
    now = timezone.now()
    minutes = rewards.reward_outcomes_per_minute(tenant=tenant, since=now.replace(second=0, microsecond=0))
    if not minutes:
        return None
    row = minutes[-1]
    payload = {
        "minute": chart_time(row["minute"]),
        "reward_mean": row["reward_mean"],
        "success_rate": row["success_rate"],
        "rewards": row["rewards"],
        "sent_at": now.timestamp(),
    }
    metrics_publish(tenant_id=tenant.pk, stream=OUTCOMES_STREAM, payload=payload)
    return payload


def overview_tick() -> int:
    """Every tenant's current-minute outcome point, published; returns how many were sent. Cross-tenant by
    design (a beat task), each tenant's point to its own stream."""
    return sum(outcomes_publish(tenant=tenant) is not None for tenant in tenant_list_all())
