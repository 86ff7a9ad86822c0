"""One load at a time per key, for the gateway's per-process snapshots (tenant policy, routing candidates
and plan, backend profiles, context lengths, version serving).

Each snapshot lives a few seconds. Without this, the moment one expired under load, every request in
flight found it stale and made its own database read (32 concurrent requests: 32 identical queries,
each holding a thread and the GIL while the answers were built). Now the first caller starts the load
and the others await the same one; a caller that is cancelled (its client went away) does not cancel
the load the others wait on. A failed load fails every waiter and is not kept: the next caller tries
again.
"""

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

_loading: dict[Hashable, asyncio.Task] = {}


def _forget(key: Hashable, task: asyncio.Task) -> None:
    if _loading.get(key) is task:
        del _loading[key]
    if not task.cancelled():
        task.exception()  # retrieved here too, so a failure every waiter abandoned is not reported as lost


async def single_flight(key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
    """The result of `load()`, shared with every caller that asks for `key` while it runs."""
    loop = asyncio.get_running_loop()
    task = _loading.get(key)
    if task is None or task.done() or task.get_loop() is not loop:  # another loop's: a test's, gone
        task = loop.create_task(load())
        _loading[key] = task
        task.add_done_callback(lambda finished: _forget(key, finished))
    return await asyncio.shield(task)


def loads_in_flight() -> int:
    return len(_loading)
