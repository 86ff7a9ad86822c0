"""A per-process snapshot of each tenant's policy (refreshed every few seconds), and the checks the
gateway makes before forwarding: model allowed, rate limits, budget reservation."""

import asyncio
import math
import time
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.single_flight import single_flight

SNAPSHOT_SECONDS = 2.0


@dataclass(frozen=True)
class PolicySnapshot:
    tenant_id: int
    allowed_models: frozenset[str]
    rate_limit_rpm: int | None
    rate_limit_tpm: int | None
    monthly_budget_usd: float | None
    consent_mode: str
    pii_mode: str
    retention_days: int
    price_table: dict
    custom_patterns: tuple

    def allows(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        prices = self.price_table.get(model) or {}
        return (
            prompt_tokens * float(prices.get("prompt_per_1k", 0))
            + completion_tokens * float(prices.get("completion_per_1k", 0))
        ) / 1000.0

    def retention_until(self):
        return timezone.now() + timedelta(days=self.retention_days)


_snapshots: dict[int, tuple[float, PolicySnapshot]] = {}


def policy_load(tenant_id: int) -> PolicySnapshot:
    """The tenant's policy as a snapshot, read now (synchronous; the gateway caches it in policy_for)."""
    from apps.tenants.models import TenantPolicy

    policy = TenantPolicy.objects.get(tenant_id=tenant_id)
    from workers.pii import CustomPattern

    patterns = tuple(CustomPattern(name=item["name"], regex=item["regex"]) for item in policy.pii_patterns)
    return PolicySnapshot(
        tenant_id=tenant_id,
        allowed_models=frozenset(policy.allowed_models),
        rate_limit_rpm=policy.rate_limit_rpm,
        rate_limit_tpm=policy.rate_limit_tpm,
        monthly_budget_usd=float(policy.monthly_budget_usd)
        if policy.monthly_budget_usd is not None
        else None,
        consent_mode=policy.consent_mode,
        pii_mode=policy.pii_mode,
        retention_days=policy.retention_days,
        price_table=policy.price_table,
        custom_patterns=patterns,
    )


async def policy_for(tenant_id: int) -> PolicySnapshot:
    cached = _snapshots.get(tenant_id)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    return await single_flight(("policy", tenant_id), lambda: _policy_refresh(tenant_id))


async def _policy_refresh(tenant_id: int) -> PolicySnapshot:
    snapshot = await database(policy_load)(tenant_id)
    _snapshots[tenant_id] = (time.monotonic() + SNAPSHOT_SECONDS, snapshot)
    return snapshot


def snapshots_clear() -> None:
    _snapshots.clear()


class WindowCounter:
    """Per-tenant sliding one-minute limits for requests and tokens, counted in the counters every process
    shares (apps/core/counters.py: Redis, or the embedded file cache under a lock), so N web workers or
    hosts enforce one limit, not N.

    The window slides: the count is this minute's bucket plus the previous minute's bucket weighted by the
    share of it still inside the last 60 s. A fixed window would let twice the limit through around a
    minute boundary (the limit just before it, the limit again just after). A request is counted first
    and refused (and its count given back) when the estimate passes the limit, so concurrent requests
    cannot all pass a check made before any of them is counted. The counter calls are blocking I/O, so
    they run off the event loop."""

    WINDOW_SECONDS = 60

    async def reserve(self, *, tenant_id: int, kind: str, amount: int, limit: int | None) -> None:
        if limit is None:
            return
        await asyncio.to_thread(self.reserve_now, tenant_id=tenant_id, kind=kind, amount=amount, limit=limit)

    def reserve_now(
        self, *, tenant_id: int, kind: str, amount: int, limit: int, now: float | None = None
    ) -> None:
        from apps.core.counters import counter_add, counter_value

        now = time.time() if now is None else now
        bucket, into = divmod(now, self.WINDOW_SECONDS)
        key = f"gateway-rate:{tenant_id}:{kind}:{int(bucket)}"
        lifetime = 2 * self.WINDOW_SECONDS
        used = counter_add(key=key, amount=amount, window_seconds=lifetime)
        previous = counter_value(key=f"gateway-rate:{tenant_id}:{kind}:{int(bucket) - 1}")
        carried = previous * (1 - into / self.WINDOW_SECONDS)
        if used + carried <= limit:
            return
        counter_add(key=key, amount=-amount, window_seconds=lifetime)
        retry_after = self._retry_after(
            limit=limit, amount=amount, used=used - amount, previous=previous, into=into
        )
        unit = "requests" if kind == "rpm" else "tokens"
        raise GatewayError(
            429,
            f"rate limit: {limit} {unit} per minute for this tenant; retry in {retry_after} s",
            f"rate_limit_{kind}",
            retry_after=retry_after,
        )

    def _retry_after(self, *, limit: int, amount: int, used: int, previous: int, into: float) -> int:
        """Seconds until the same request would fit, if nothing else is counted meanwhile: the moment the
        previous minute's share has shrunk enough, or else the start of the next minute."""
        room = limit - used - amount
        to_next_minute = self.WINDOW_SECONDS - into
        if room >= 0 and previous > 0:
            fits_at = (1 - room / previous) * self.WINDOW_SECONDS
            return max(1, math.ceil(min(fits_at - into, to_next_minute)))
        return max(1, math.ceil(to_next_minute))


def _reserve(tenant_id: int, amount: float, budget: float):
    from apps.gateway.services import budget_reserve_amount

    return budget_reserve_amount(tenant_id=tenant_id, amount=amount, budget=budget)


def _settle(tenant_id: int, reservation, actual: float) -> None:
    from apps.gateway.services import budget_settle_amount

    budget_settle_amount(tenant_id=tenant_id, reservation=reservation, actual=actual)


async def budget_reserve(policy: PolicySnapshot, amount: float):
    """Reserves `amount` of this month's budget atomically in the database (a conditional UPDATE), so
    concurrent requests in any number of processes cannot overspend. Returns the reservation to settle (None
    without a budget)."""
    if policy.monthly_budget_usd is None:
        return None
    reservation = await database(_reserve)(policy.tenant_id, amount, policy.monthly_budget_usd)
    if reservation is None:
        raise GatewayError(
            429,
            f"monthly budget of ${policy.monthly_budget_usd:.2f} would be exceeded by this "
            f"request (reserved ${amount:.6f})",
            "budget_exceeded",
            retry_after=3600,
        )
    return reservation


async def budget_settle(policy: PolicySnapshot, reservation, actual: float) -> None:
    if reservation is None:
        return
    await asyncio.shield(database(_settle)(policy.tenant_id, reservation, actual))
