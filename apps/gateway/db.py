"""How the gateway's event loop reaches the database.

Request-path reads and writes run on Django's one thread-sensitive worker thread (`database`); the
journal flusher's batched inserts run on a thread of their own (`flusher_database`), so a request never
waits behind a group commit. Django's end-of-request connection housekeeping (close_old_connections:
CONN_MAX_AGE, broken connections, the next health check) runs at most once a second per thread, and at
once after a database error, instead of after every call.
"""

import asyncio
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import DatabaseError, close_old_connections

HOUSEKEEPING_SECONDS = 1.0
_last_housekeeping = threading.local()
_flusher_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-journal")


def _housekeeping(*, now: bool = False) -> None:
    moment = time.monotonic()
    if now or moment - getattr(_last_housekeeping, "at", 0.0) >= HOUSEKEEPING_SECONDS:
        _last_housekeeping.at = moment
        close_old_connections()


def _managed(function):
    @functools.wraps(function)
    def run(*args, **kwargs):
        try:
            result = function(*args, **kwargs)
        except DatabaseError:
            _housekeeping(now=True)
            raise
        _housekeeping()
        return result

    return run


def database(function):
    """Runs a synchronous ORM function from the event loop on Django's database thread."""
    return sync_to_async(_managed(function))


def flusher_database(function):
    """Runs a synchronous ORM function on the journal flusher's own thread (and connection)."""
    managed = _managed(function)

    async def call(*args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(
            _flusher_executor, functools.partial(managed, *args, **kwargs)
        )

    return call
