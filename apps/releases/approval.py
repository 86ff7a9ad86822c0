"""Approving a release that awaits it: the candidate becomes production (statuses, the `production` alias,
all traffic), under the tenant's two-person rule when it is on (people compared, not principals)."""

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden
from apps.releases.models import Release, ReleaseStatus
from apps.releases.release_words import release_name
from apps.releases.routing_writes import routing_set, version_status_set
from apps.releases.services import release_lock, release_transition
from apps.tenants.models import Tenant
from apps.training.choices import VersionStatus


def _check_two_people(*, tenant: Tenant, release: Release, approver: Actor) -> tuple[int, int | None]:
    """The two-person rule compares people, not principals: a key answers to the person who created it
    (`person_behind`), so one person's session and key are one person. An approval that names no person (a
    key from the CLI or the system) is refused, since it could be anyone, the starter included; so is the
    starter's own. Returns (the approver's person, the starter's person or None when no person started it)."""
    from apps.tenants.selectors import person_behind

    approver_person = person_behind(tenant=tenant, actor_kind=approver.kind, actor_id=approver.id)
    if approver_person is None:
        raise Forbidden(
            "this tenant's two-person rule: this approval names no person (the API key was not created "
            "by a member); approve as a person or with a key a member created",
            code="two_person_rule",
        )
    starter_person = person_behind(
        tenant=tenant, actor_kind=release.started_by_kind, actor_id=release.started_by_id
    )
    if approver_person == starter_person or (approver.kind, approver.id) == (
        release.started_by_kind,
        release.started_by_id,
    ):
        raise Forbidden(
            "this tenant's two-person rule: someone other than the person who started the release "
            "must approve it (a key they created counts as them)",
            code="two_person_rule",
        )
    return approver_person, starter_person


def _approval_row(*, actor: Actor, person: int | None, at) -> dict:
    return {"actor": actor.label, "kind": actor.kind, "id": actor.id, "person": person, "at": at.isoformat()}


@transaction.atomic
def release_approve(*, tenant: Tenant, actor: Actor, release_id) -> Release:
    """awaiting_approval → promoted: the candidate becomes production (alias moved, statuses set, all traffic).
    409 unless awaiting approval. Under the tenant's two-person rule: 403 when the person behind the approver
    (a key's creator) started it, or when the approval names no person; and a release that no person started
    (the evolution control plane, a key no member created) takes two different people: the first approval is
    recorded (`approvals`, audited `release.approval`) and the release keeps awaiting approval, the second
    person's promotes it (the same person again: 409 `already_approved`).
    Concurrency: two approvals at once make exactly one transition (conditional update); the other gets 409.
    Locking: the release row while approvals are counted."""
    from apps.tenants.selectors import two_person_rule_on
    from apps.training.services import alias_move

    release = release_lock(tenant=tenant, release_id=release_id)
    if release.status != ReleaseStatus.AWAITING_APPROVAL:
        raise Conflict(
            f"the release is {release.status}, not awaiting approval", code="not_awaiting_approval"
        )
    now = timezone.now()
    approvals = list(
        Release.objects.select_for_update().filter(pk=release.pk).values_list("approvals", flat=True).get()
        or []
    )
    approver_person = None
    if two_person_rule_on(tenant=tenant):
        approver_person, starter_person = _check_two_people(tenant=tenant, release=release, approver=actor)
        if starter_person is None:
            if any(row.get("person") == approver_person for row in approvals):
                raise Conflict(
                    "you approved this release already; under the two-person rule another person must",
                    code="already_approved",
                )
            if not approvals:
                approvals.append(_approval_row(actor=actor, person=approver_person, at=now))
                Release.objects.filter(pk=release.pk, status=ReleaseStatus.AWAITING_APPROVAL).update(
                    approvals=approvals
                )
                audit_record(
                    tenant=tenant,
                    actor=actor,
                    verb="release.approval",
                    target=release,
                    data={"approvals": 1, "required": 2, "started_by": release.started_by},
                )
                release.refresh_from_db()
                return release
    approvals.append(_approval_row(actor=actor, person=approver_person, at=now))
    release = release_transition(
        release=release,
        to=ReleaseStatus.PROMOTED,
        actor=actor,
        reason=f"approved by {', '.join(row['actor'] for row in approvals)}",
        approved_by=", ".join(row["actor"] for row in approvals)[:150],
        approvals=approvals,
    )
    candidate, baseline = release.candidate, release.baseline
    candidate.refresh_from_db()
    baseline.refresh_from_db()
    version_status_set(
        tenant=tenant,
        actor=actor,
        version=candidate,
        status=VersionStatus.PRODUCTION,
        reason=f"{release_name(release)} promoted",
    )
    if baseline.status == VersionStatus.PRODUCTION:
        version_status_set(
            tenant=tenant,
            actor=actor,
            version=baseline,
            status=VersionStatus.RETIRED,
            reason=f"replaced by {candidate} ({release_name(release)})",
        )
    alias_move(
        tenant=tenant,
        actor=actor,
        name=release.model,
        alias="production",
        version=candidate,
        reason=f"{release_name(release)} promoted",
    )
    routing_set(
        tenant=tenant,
        model=release.model,
        stable=candidate,
        release=release,
        actor=actor,
        reason=f"{release_name(release)} promoted",
    )
    return release
