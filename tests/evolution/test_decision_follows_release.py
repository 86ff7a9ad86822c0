"""A promotion decision's state follows its release's (issue 26, finding 10): a release aborted or promoted
elsewhere closes its `promote` decision the way it went, at once (apps.releases' `release_finished`, on
commit) or, when that was lost, on the first action on it; an action on a finished decision is refused with
the reason over REST (409) and in the console; the console asks before an approval is sent, naming the
version and its share of traffic."""

import pytest
from django.test import Client

from apps.evolution.models import Decision, DecisionStatus
from apps.loop.control import evolution_tick
from apps.releases.models import ReleaseStatus
from apps.tenants.permissions import Role
from tests.evolution.factories import AutoPolicyFactory
from tests.evolution.helpers import CALM
from tests.releases.helpers import MODEL, release_at

pytestmark = pytest.mark.django_db
BASE = "/api/v1/evolution"


@pytest.fixture
def waiting(tenant):
    """A release awaiting approval and the `promote` decision the control plane proposed for it."""
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL, approval_mode="one_operator")
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    (decision,) = Decision.objects.filter(policy=policy, kind="promote")
    assert decision.status == DecisionStatus.PROPOSED
    return release, policy, decision


def _console(user):
    client = Client()
    client.force_login(user)
    return client


def _card(page: str, decision_id: int) -> str:
    start = page.index(f'data-decision="{decision_id}"')
    return page[start : page.index("</li>", start)]


def test_aborting_a_release_closes_its_promotion_and_an_approval_is_refused_with_the_reason(
    api_client, member, waiting, django_capture_on_commit_callbacks
):
    release, policy, decision = waiting
    alice, bob = member(Role.OPERATOR), member(Role.OPERATOR)
    with django_capture_on_commit_callbacks(execute=True):
        aborted = api_client(user=alice).post(
            f"/api/v1/releases/{release.pk}/abort/", {"reason": "wrong candidate"}, format="json"
        )
    assert aborted.status_code == 200, aborted.content
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.REJECTED
    assert decision.rejected_by == alice.username
    assert decision.outcome == (
        f"the release of v{release.candidate.number} over v{release.baseline.number} was aborted by {alice.username}: wrong candidate"
    )

    page = _console(bob).get(f"/evolution/policies/{policy.pk}/").content.decode()
    card = _card(page, decision.pk)
    assert "Rejected" in card
    assert "button" not in card  # nothing to approve or reject
    refused = api_client(user=bob).post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "decision_closed"
    assert "was aborted by" in refused.json()["error"]["message"]
    shown = _console(bob).post(f"/evolution/decisions/{decision.pk}/approve/", follow=True)
    errors = [str(message) for message in shown.context["messages"] if message.level_tag == "error"]
    assert len(errors) == 1
    assert "wrong candidate" in errors[0]
    decision.refresh_from_db()
    assert (decision.status, decision.approvals) == (DecisionStatus.REJECTED, [])


def test_an_approval_of_a_promotion_whose_release_ended_unheard_is_refused_and_closes_it(
    api_client, member, waiting
):
    release, _, decision = waiting
    # Aborted with no on-commit callbacks run: the decision did not hear of it.
    api_client(user=member(Role.OPERATOR)).post(f"/api/v1/releases/{release.pk}/abort/", {}, format="json")
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.PROPOSED
    refused = api_client(user=member(Role.OPERATOR)).post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["code"] == "release_finished"
    assert "aborted" in refused.json()["error"]["message"]
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.REJECTED
    assert decision.approvals == []
    release.refresh_from_db()
    assert release.status == ReleaseStatus.ABORTED


def test_approving_the_release_on_its_own_page_shows_its_promotion_succeeded(
    member, waiting, django_capture_on_commit_callbacks
):
    release, policy, decision = waiting
    operator = member(Role.OPERATOR)
    with django_capture_on_commit_callbacks(execute=True):
        _console(operator).post(f"/releases/{release.pk}/approve/")
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED
    assert decision.outcome.startswith(
        f"the release of v{release.candidate.number} over v{release.baseline.number} was promoted by {operator.username}"
    )
    card = _card(_console(operator).get(f"/evolution/policies/{policy.pk}/").content.decode(), decision.pk)
    assert "Succeeded" in card
    assert "Rejected" not in card


def test_the_console_asks_before_approving_naming_the_version_and_its_traffic(member, waiting):
    release, policy, decision = waiting
    page = _console(member(Role.OPERATOR)).get(f"/evolution/policies/{policy.pk}/").content.decode()
    card = _card(page, decision.pk)
    question = (
        f"Approve promoting v{release.candidate.number} of {MODEL} to production? "
        "It then takes 100% of new sessions."
    )
    assert f'data-confirm="{question}"' in card
