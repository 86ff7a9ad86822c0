"""The gateway's PII scans (workers/pii) of what a step stores or a policy blocks: the tenant's scanner, bounded
(`AREAL_PII_MAX_SCAN_CHARS`, `AREAL_PII_PATTERN_TIMEOUT_MS`), and each scan run on the event loop when small
and in a small thread pool when large. A request's messages go through the per-process memo (scan_memo.py):
an agent re-sends its conversation every turn. What the scans decide (block, redact) is the step's
(recording.py); the stored response of the Responses API is scanned here too (responses.py).
"""

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

from apps.gateway.errors import GatewayError
from apps.gateway.scan_memo import scan_request, text_size
from workers.pii import InvalidPattern, ScanLimits, sanitizer_for

# A scan of a few thousand characters costs well under a millisecond on ordinary text and a few milliseconds
# on the worst input (bench/sanitizer.py): it stays on the event loop; larger ones go to the pool, which is
# small so that a flood of huge requests queues there instead of taking every core.
INLINE_SCAN_CHARS = 4096
_scan_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pii-scan")


def policy_scanner(policy):
    """The sanitizer for the tenant's policy (its custom patterns), within the configured limits; a pattern
    that no longer compiles refuses the request (422 `pii_policy_invalid`) rather than letting it through
    unscanned."""
    limits = ScanLimits(
        max_chars=settings.AREAL_PII_MAX_SCAN_CHARS,
        custom_seconds=settings.AREAL_PII_PATTERN_TIMEOUT_MS / 1000,
    )
    try:
        return sanitizer_for(policy.custom_patterns, limits)
    except InvalidPattern as error:  # stored before patterns were validated on save
        raise GatewayError(
            422,
            f"this tenant's PII pattern {error.name!r} is invalid ({error.reason}); an "
            "admin must fix it in the policy before requests can be scanned",
            "pii_policy_invalid",
        ) from None


async def request_scan(policy, scanner, value):
    """`scanner.scan_value(value)`, each message taken from the per-process memo when it was scanned before
    (scan_memo.py: an agent re-sends its conversation every turn); off the event loop when large."""
    size = text_size(value, INLINE_SCAN_CHARS)
    scan = functools.partial(
        scan_request,
        scanner,
        has_custom_patterns=bool(policy.custom_patterns),
        size=size if size <= INLINE_SCAN_CHARS else None,
    )
    if size <= INLINE_SCAN_CHARS:
        return scan(value)
    return await asyncio.get_running_loop().run_in_executor(_scan_pool, scan, value)


async def off_the_loop(scan, value):
    """`scan(value)`, in the thread pool when the value is larger than INLINE_SCAN_CHARS."""
    if text_size(value, INLINE_SCAN_CHARS) <= INLINE_SCAN_CHARS:
        return scan(value)
    return await asyncio.get_running_loop().run_in_executor(_scan_pool, scan, value)
