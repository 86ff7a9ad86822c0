"""Console trajectory browser, trajectory detail and replay form, through the real pages."""

import re
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.tenants.permissions import Role
from apps.trajectories.models import Trajectory
from apps.trajectories.services import steps_ingest
from tests.inference.factories import BackendFactory
from tests.trajectories.builders import SERVED_MODEL, gateway_step, imported, ingested

pytestmark = pytest.mark.django_db

LIST = "/trajectories/"


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _row(page: str, session_id: str) -> str:
    """The table row of the trajectory with this session id."""
    rows = [row for row in re.split(r"<tr[ >]", page) if f"<code>{session_id}</code>" in row]
    assert len(rows) == 1, f"{session_id} is in {len(rows)} rows"
    return rows[0]


def _sessions(response) -> list[str]:
    return [trajectory.session_id for trajectory in response.context["page"]]


@pytest.fixture
def viewer(member):
    return _signed_in(member(Role.VIEWER))


@pytest.fixture
def operator(member):
    return _signed_in(member(Role.OPERATOR))


@pytest.fixture
def browsed(tenant, other_tenant):
    imported(
        tenant,
        "s-weather",
        agent={"name": "weather-agent", "version": "1"},
        task_id="t-1",
        status="complete",
        purpose="production",
        started_at="2025-03-01T10:00:00Z",
        ended_at="2025-03-01T10:05:00Z",
        rewards=[0.9],
    )
    imported(
        tenant,
        "s-coder-eval",
        agent={"name": "coder", "version": "1"},
        task_id="t-2",
        status="aborted",
        purpose="eval",
        started_at="2025-03-02T10:00:00Z",
        ended_at="2025-03-02T10:05:00Z",
        rewards=[0.2, 0.6],
    )
    imported(
        tenant,
        "s-coder-open",
        agent={"name": "coder", "version": "2"},
        task_id="t-1",
        status="open",
        purpose="production",
        started_at="2025-03-03T10:00:00Z",
        rewards=[],
    )
    imported(
        other_tenant,
        "s-globex-secret",
        agent={"name": "coder", "version": "1"},
        task_id="t-1",
        status="open",
        purpose="production",
        started_at="2025-03-03T11:00:00Z",
        rewards=[0.5],
    )


# --------------------------------------------------------------------------------------------------- browser


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["s-coder-open", "s-coder-eval", "s-weather"]),
        ("?agent=coder", ["s-coder-open", "s-coder-eval"]),
        ("?task_id=t-1", ["s-coder-open", "s-weather"]),
        ("?status=aborted", ["s-coder-eval"]),
        ("?purpose=eval", ["s-coder-eval"]),
        ("?reward_min=0.5", ["s-coder-eval", "s-weather"]),
        ("?reward_max=0.3", ["s-coder-eval"]),
        ("?session_id=s-weather", ["s-weather"]),
        ("?started_after=2025-03-02T00:00&started_before=2025-03-03T00:00", ["s-coder-eval"]),
        ("?agent=coder&status=open", ["s-coder-open"]),
    ],
)
def test_the_browser_filters_within_the_tenant(viewer, browsed, query, expected):
    response = viewer.get(LIST + query)
    assert response.status_code == 200
    assert _sessions(response) == expected
    page = response.content.decode()
    for session_id in expected:
        assert f"<code>{session_id}</code>" in page
    assert "s-globex-secret" not in page


def test_the_browser_shows_cost_and_reward_columns(viewer, browsed, tenant):
    ingested(
        tenant,
        "s-live",
        [gateway_step(tenant, "s-live", cost_usd=0.0125), gateway_step(tenant, "s-live", cost_usd=0.0250)],
    )
    page = viewer.get(LIST).content.decode()
    assert re.search(r"<th>Cost</th>\s*<th>Reward</th>", page)
    weather = _row(page, "s-weather")
    assert "$0.0003" in weather  # 0.000125 + 0.0002, the imported steps' costs
    assert ">0.90<" in weather
    assert ">0.40<" in _row(page, "s-coder-eval")  # the mean of 0.2 and 0.6
    assert "—" in _row(page, "s-coder-open").split("$")[-1]  # no reward yet
    live = _row(page, "s-live")
    assert "$0.0375" in live
    assert "<td>2</td>" in live  # steps


def test_the_browser_paginates_and_keeps_the_filter(viewer, tenant, other_tenant):
    start = timezone.now() - timedelta(hours=1)
    steps_ingest(
        records=[
            gateway_step(
                tenant, f"bulk-{number:02d}", agent_name="bulk", created_at=start + timedelta(seconds=number)
            )
            for number in range(53)
        ]
        + [gateway_step(tenant, "loner", agent_name="other")]
        + [gateway_step(other_tenant, f"theirs-{number}", agent_name="bulk") for number in range(3)]
    )

    first = viewer.get(LIST + "?agent=bulk")
    assert first.context["page"].paginator.count == 53
    assert _sessions(first) == [f"bulk-{number:02d}" for number in range(52, 2, -1)]  # newest first, 50 rows
    page = first.content.decode()
    assert "Page 1 of 2 (53 in all)" in page
    assert 'href="?agent=bulk&page=2"' in page

    second = viewer.get(LIST + "?agent=bulk&page=2")
    assert _sessions(second) == ["bulk-02", "bulk-01", "bulk-00"]
    assert 'href="?agent=bulk&page=1"' in second.content.decode()
    assert not {*_sessions(first)} & {*_sessions(second)}
    assert "loner" not in page + second.content.decode()
    assert "theirs-" not in page + second.content.decode()


# --------------------------------------------------------------------------------------------------- detail


def test_the_detail_page_shows_messages_tool_calls_tokens_and_rewards(viewer, tenant):
    trajectory = imported(tenant, "weather", rewards=[0.75])
    response = viewer.get(f"{LIST}{trajectory.id}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "What is the weather in Paris?" in page  # the observed messages
    assert "You are a helpful assistant." in page
    assert "22 C, sunny" in page  # the tool message of the second call
    assert "→ get_weather({&quot;city&quot;: &quot;Paris&quot;})" in page  # the action's tool call
    assert "The weather in Paris is 22 C and sunny." in page
    assert [step["kind"] for step in response.context["steps"]] == [
        "llm_call",
        "tool_call",
        "tool_result",
        "llm_call",
        "user_feedback",
    ]
    tokens = re.findall(
        r'<span class="token" style="--shade: ([0-9.]+)" title="id (\d+) · logprob (-?[0-9.]+)', page
    )
    assert len(tokens) == 19 + 13  # both llm_calls' completion tokens
    assert tokens[0][1] == "151657"
    assert tokens[0][2] == "-0.125"
    assert all(0 <= float(shade) <= 1 for shade, _, _ in tokens)
    assert "Completion tokens (19), shaded by behaviour logprob" in page
    assert "model version qwen2-0.5b-rl-7 · policy 7" in page
    assert ">0.75<" in page
    assert "evaluator" in page
    assert "PII redacted" not in page


def test_the_detail_page_flags_pii_aborts_and_retries(viewer, tenant):
    first = gateway_step(
        tenant,
        "flagged",
        pii_entities=["email", "phone"],
        tokens=None,
        tokenizer="",
        observation={
            "messages": [{"role": "user", "content": "mail [EMAIL] or call [PHONE]"}],
            "tools": None,
            "params": {},
        },
    )
    retry = gateway_step(tenant, "flagged", retry_of=first["step_id"])
    aborted = gateway_step(
        tenant,
        "flagged",
        aborted=True,
        error="client disconnected mid-stream",
        result={"finish_reason": None, "error": "client disconnected mid-stream"},
    )
    trajectory = ingested(tenant, "flagged", [first, retry, aborted])
    page = viewer.get(f"{LIST}{trajectory.id}/").content.decode()
    assert "PII redacted: email, phone" in page
    assert "mail [EMAIL] or call [PHONE]" in page
    assert "Token ids dropped: they would encode the redacted text." in page
    assert page.count("PII redacted") == 1  # only the redacted step is flagged
    assert f"retry of {first['step_id'][:12]}" in page
    assert "aborted: client disconnected mid-stream" in page
    assert page.count('<span class="token"') == 2 + 2  # the retry's and the aborted call's tokens


def test_another_tenants_trajectory_is_a_404_page_like_a_missing_one(viewer, tenant, other_tenant):
    theirs = imported(other_tenant, "s-globex-secret", rewards=[0.5])
    mine = imported(tenant, "mine", rewards=[])
    assert viewer.get(f"{LIST}{mine.id}/").status_code == 200
    hidden = viewer.get(f"{LIST}{theirs.id}/")
    missing = viewer.get(f"{LIST}{uuid.uuid4()}/")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.content == missing.content
    assert b"s-globex-secret" not in hidden.content
    assert b"What is the weather" not in hidden.content


# --------------------------------------------------------------------------------------------------- replay


@pytest.fixture
def replayable(tenant):
    BackendFactory(tenant=tenant, name="candidate", served_model=SERVED_MODEL, model_version="2")
    return ingested(tenant, "source", [gateway_step(tenant, "source")])


def test_the_replay_form_is_shown_to_operators_and_not_to_viewers(operator, viewer, replayable):
    url = f"{LIST}{replayable.id}/"
    for_operator = operator.get(url).content.decode()
    assert f'action="{url}replay/"' in for_operator
    assert f'<option value="{SERVED_MODEL}@2">' in for_operator
    for_viewer = viewer.get(url).content.decode()
    assert "replay/" not in for_viewer
    assert 'name="target"' not in for_viewer
    assert "Name a colour" in for_viewer  # the viewer still reads the trajectory


def test_a_viewer_posting_a_replay_is_refused_and_nothing_is_created(
    viewer, replayable, tenant, django_capture_on_commit_callbacks
):
    before = set(Trajectory.objects.values_list("id", flat=True))
    with django_capture_on_commit_callbacks() as enqueued:
        response = viewer.post(f"{LIST}{replayable.id}/replay/", {"target": f"{SERVED_MODEL}@2"})
    assert response.status_code == 403
    assert set(Trajectory.objects.values_list("id", flat=True)) == before
    assert not AuditEvent.objects.filter(verb="trajectory.replay").exists()
    assert enqueued == []


def test_an_operator_replay_opens_a_replay_trajectory(
    operator, replayable, tenant, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as enqueued:
        response = operator.post(f"{LIST}{replayable.id}/replay/", {"target": f"{SERVED_MODEL}@2"})
    replay = Trajectory.objects.get(tenant=tenant, purpose="replay")
    assert response.status_code == 302
    assert response["Location"] == f"{LIST}{replay.id}/"
    assert len(enqueued) == 1
    assert AuditEvent.objects.filter(tenant=tenant, verb="trajectory.replay").count() == 1


def test_replaying_another_tenants_trajectory_answers_like_a_missing_one(member, other_tenant, tenant):
    BackendFactory(tenant=tenant, served_model=SERVED_MODEL)
    theirs = ingested(other_tenant, "theirs", [gateway_step(other_tenant, "theirs")])
    operator = _signed_in(member(Role.OPERATOR))
    for trajectory_id in (theirs.id, uuid.uuid4()):
        response = operator.post(
            f"{LIST}{trajectory_id}/replay/", {"target": f"{SERVED_MODEL}@1"}, follow=True
        )
        assert response.redirect_chain == []  # answered at once, not redirected to a page that then 404s
        assert response.status_code == 404
    assert not Trajectory.objects.filter(purpose="replay").exists()
    assert not AuditEvent.objects.filter(verb="trajectory.replay").exists()
