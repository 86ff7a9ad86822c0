"""What other apps may hear of releases without apps.releases importing them (they stand above it):
`release_finished` is sent once a release reached promoted, rolled back or aborted, after the transaction that
moved it committed, with `tenant_id` and `release_id`. The evolution control plane closes its decisions about
that release with it (apps/evolution/decisions.py); a receiver's error is logged, never the release's."""

import logging

from django.dispatch import Signal

logger = logging.getLogger(__name__)
release_finished = Signal()


def release_finished_send(*, tenant_id: int, release_id: int) -> None:
    for receiver, result in release_finished.send_robust(
        sender="releases", tenant_id=tenant_id, release_id=release_id
    ):
        if isinstance(result, Exception):
            logger.error(
                "a receiver of release_finished (%s) failed for release %s",
                getattr(receiver, "__name__", receiver),
                release_id,
                exc_info=result,
            )
