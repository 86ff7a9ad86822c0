"""Sign-ins, sign-in failures and sign-outs in the audit log.

Django's auth signals are the one place that sees every sign-in path (the console's form, the Django admin,
`Client.login` in a shell), so the receivers here are the adapters; the write is `sign_in_audit`. The audit
log is per tenant, so an event is recorded in every tenant the person is a member of; a failure for a
username nobody has is logged (a warning with the address), since no tenant owns it.
"""

import logging

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db import transaction
from django.dispatch import receiver

from apps.audit.services import Actor, audit_record
from apps.core.login_throttle import client_address
from apps.tenants.selectors import membership_list_for_user

logger = logging.getLogger(__name__)
VERBS = ("auth.sign_in", "auth.sign_in_failed", "auth.sign_out")


def _address(request) -> str:
    return client_address(request) if request is not None else ""


@transaction.atomic
def sign_in_audit(*, user, verb: str, address: str, path: str = "") -> int:
    """Records `verb` (one of VERBS) in the audit chain of every tenant `user` belongs to; returns how many."""
    assert verb in VERBS, verb
    memberships = list(membership_list_for_user(user=user))
    actor = Actor.user(user) if verb != "auth.sign_in_failed" else Actor.system("sign-in")
    for membership in memberships:
        audit_record(
            tenant=membership.tenant,
            actor=actor,
            verb=verb,
            target=user,
            data={"user": user.get_username(), "address": address, "path": path},
        )
    return len(memberships)


@receiver(user_logged_in, dispatch_uid="tenants.sign_in_audit")
def _signed_in(sender, request, user, **kwargs):
    sign_in_audit(
        user=user, verb="auth.sign_in", address=_address(request), path=getattr(request, "path", "")
    )


@receiver(user_logged_out, dispatch_uid="tenants.sign_out_audit")
def _signed_out(sender, request, user, **kwargs):
    if user is not None:
        sign_in_audit(
            user=user, verb="auth.sign_out", address=_address(request), path=getattr(request, "path", "")
        )


@receiver(user_login_failed, dispatch_uid="tenants.sign_in_failed_audit")
def _sign_in_failed(sender, credentials, request=None, **kwargs):
    username = str(credentials.get("username", ""))[:150]
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        logger.warning(
            "sign-in failed for an unknown username from %s", _address(request) or "an unknown address"
        )
        return
    sign_in_audit(
        user=user, verb="auth.sign_in_failed", address=_address(request), path=getattr(request, "path", "")
    )
