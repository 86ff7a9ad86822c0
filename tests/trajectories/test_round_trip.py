"""ATDP round trips are faithful: a trajectory exported from one tenant, imported into another through the
import API and exported again comes back field by field, except the fields listed in ALLOWED_TO_DIFFER.
Both records are valid ATDP. Governance is the real state: the current review (apps.qualification) and
the gates' verdict, which the importing tenant's gates reach again from the same facts."""

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.qualification.models import Review
from apps.tenants.permissions import Role
from apps.trajectories.models import Step, Trajectory
from apps.trajectories.services import trajectory_end
from tests.trajectories.builders import atdp_record, gateway_step, ingested
from workers.atdp import validate_trajectory

pytestmark = pytest.mark.django_db

EXPORT = "/api/v1/trajectories/export/"
IMPORT = "/api/v1/trajectories/import/"
REVIEWS = "/api/v1/reviews/"

# The only fields a round trip may change, and why.
ALLOWED_TO_DIFFER = {
    "trajectory_id": "an import never chooses a primary key: the copy gets a fresh id",
    "tenant": "the record names the tenant that holds it",
    "governance.qualification.at": "the importing tenant's gates judged the copy when it arrived",
}


@pytest.fixture
def gates_run_on_commit(django_capture_on_commit_callbacks):
    """Runs what a block enqueues on commit, the enqueued Celery tasks in-process (the qualification
    gates an import or a review enqueues)."""
    from areal_web.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True

    def run():
        return django_capture_on_commit_callbacks(execute=True)

    yield run
    app.conf.task_always_eager = previous


def _jsonl(*records) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def _import(client, body: bytes):
    return client.generic("POST", IMPORT, body, content_type="application/x-ndjson")


def _export(client, **filters) -> list[dict]:
    response = client.get(EXPORT, filters)
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    return [json.loads(line) for line in body.decode().splitlines()]


def _flat(value, path: str = "") -> dict:
    """Every leaf of a record by its path (`steps[3].tokens.loss_mask[40]`); empty objects and lists are
    leaves, so a dropped key shows as a difference."""
    if isinstance(value, dict) and value:
        return {
            leaf: item
            for key, child in value.items()
            for leaf, item in _flat(child, f"{path}.{key}" if path else key).items()
        }
    if isinstance(value, list) and value:
        return {
            leaf: item
            for position, child in enumerate(value)
            for leaf, item in _flat(child, f"{path}[{position}]").items()
        }
    return {path: value}


def _differences(first: dict, second: dict) -> set[str]:
    first, second, missing = _flat(first), _flat(second), object()
    return {
        path for path in first.keys() | second.keys() if first.get(path, missing) != second.get(path, missing)
    }


def _in_the_future(days: int) -> str:
    return (timezone.now() + timedelta(days=days)).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _rich_record(tenant) -> dict:
    """make_trajectory's tool-using agent with every field set: token ids, logprobs, per-token versions and
    loss masks, tool calls and results, tool and prompt versions, data classes, replayability, rewards,
    an approved review, consent and a retention date."""
    record = atdp_record(tenant, "rich-session")
    for step in record["steps"]:
        tokens = step["tokens"]
        if tokens:
            prompt, completion = len(tokens["prompt_ids"]), len(tokens["completion_ids"])
            tokens["loss_mask"] = [0] * prompt + [1] * (completion - 1) + [0]
    record["steps"][2]["result"]["error"] = {"type": "tool_error", "message": "retried once", "exit_code": 0}
    record["steps"][2]["pii"] = {"redacted": True, "entities": []}
    record["governance"]["retention_until"] = _in_the_future(30)
    record["governance"]["data_class"] = "confidential"
    return record


def _move(client_from, client_to, trajectory_filters: dict, *, to_tenant) -> tuple[dict, dict]:
    """Exports one trajectory from the first client's tenant and imports it into `to_tenant`. Step and
    reward ids are global keys, which an import keeps (agents and rewards name them), so a copy within one
    deployment is refused (see the test below): the record moves, as it would between two deployments."""
    (exported,) = _export(client_from, **trajectory_filters)
    Trajectory.objects.filter(pk=exported["trajectory_id"]).delete()
    response = _import(client_to, _jsonl(dict(exported, tenant=to_tenant.slug)))
    assert response.status_code == 200, response.content
    assert response.json()["rejected"] == []
    (stored,) = response.json()["stored"]
    assert stored["source_trajectory_id"] == exported["trajectory_id"] != stored["trajectory_id"]
    return exported, stored


def _assert_faithful(original: dict, copy: dict) -> None:
    assert validate_trajectory(original) == []
    assert validate_trajectory(copy) == []
    differences = _differences(original, copy)
    assert differences <= ALLOWED_TO_DIFFER.keys(), sorted(differences - ALLOWED_TO_DIFFER.keys())
    assert {"trajectory_id", "tenant"} <= differences


def test_an_sdk_record_survives_import_export_and_a_move_to_another_tenant(
    api_client, member, tenant, other_tenant, gates_run_on_commit
):
    writer, reader = api_client(["trajectories:write"]), api_client(["trajectories:read"])
    their_writer = api_client(["trajectories:write"], of=other_tenant)
    their_reader = api_client(["trajectories:read"], of=other_tenant)
    source = _rich_record(tenant)
    with gates_run_on_commit():
        assert _import(writer, _jsonl(source)).json()["accepted"] == 1
    # A person of this tenant reviews it: the newest review is the current one, and it holds the gates.
    reviewer = member(Role.OPERATOR)
    (row,) = Trajectory.objects.for_tenant(tenant)
    with gates_run_on_commit():
        response = api_client(user=reviewer).post(
            REVIEWS,
            {"trajectory_id": str(row.pk), "status": "needs_changes", "note": "cite the weather source"},
            format="json",
        )
    assert response.status_code == 201, response.content

    (exported,) = _export(reader)
    # What imports used to drop comes back as the agent logged it.
    for position in (0, 3):
        assert exported["steps"][position]["tokens"] == dict(
            source["steps"][position]["tokens"], retokenized=False
        )
    assert [step["versions"] for step in exported["steps"]] == [step["versions"] for step in source["steps"]]
    assert [step["permissions"] for step in exported["steps"]] == [
        step["permissions"] for step in source["steps"]
    ]
    assert [step["replayable"] for step in exported["steps"]] == [
        step["replayable"] for step in source["steps"]
    ]
    assert exported["steps"][2]["pii"] == {"redacted": True, "entities": []}
    assert exported["governance"]["retention_until"] == source["governance"]["retention_until"]
    assert exported["governance"]["review"] == {
        "status": "needs_changes",
        "reviewer": reviewer.get_username(),
        "at": exported["governance"]["review"]["at"],
        "note": "cite the weather source",
    }
    assert exported["governance"]["qualification"]["status"] == "disqualified"
    assert exported["governance"]["qualification"]["reasons"] == ["reviewed_if_required"]
    assert exported["cost"] == dict(source["cost"], usd=pytest.approx(source["cost"]["usd"]))

    with gates_run_on_commit():
        exported, stored = _move(reader, their_writer, {}, to_tenant=other_tenant)
    (copy,) = _export(their_reader)
    _assert_faithful(exported, copy)
    assert copy["trajectory_id"] == stored["trajectory_id"]
    imported_review = Review.objects.get(tenant=other_tenant)
    assert (imported_review.reviewer, imported_review.reviewer_label) == (None, reviewer.get_username())
    event = AuditEvent.objects.get(tenant=other_tenant, verb="trajectory.import")
    assert event.data["review"] == "needs_changes"
    assert event.data["retention_shortened"] is False


def test_a_gateway_recorded_trajectory_survives_a_move_to_another_tenant(
    api_client, tenant, other_tenant, gates_run_on_commit
):
    """Recorded the way the gateway records (harness prompt and tool versions in `state`, an aborted call
    last), reviewed and rewarded through the API, judged by the gates."""
    harness = {"prompt_version": "h3", "agent_prompt_version": "agent-7", "tool_versions": {"get_time": "2"}}
    first = gateway_step(tenant, "gw-session", state=harness, completion_ids=(7, 8, 9))
    aborted = gateway_step(
        tenant,
        "gw-session",
        state=harness,
        parent_step_id=first["step_id"],
        aborted=True,
        error="the client went away",
        result={"finish_reason": None, "error": "the client went away"},
        tokens=None,
        tokenizer="",
        created_at=timezone.now() + timedelta(seconds=1),
    )
    trajectory = ingested(tenant, "gw-session", [first, aborted])
    operator = api_client(["trajectories:read", "trajectories:write", "rewards:write"])
    with gates_run_on_commit():
        trajectory_end(tenant=tenant, trajectory_id=trajectory.pk)  # as the gateway's session end does
        reward = operator.post(
            "/api/v1/rewards/",
            {"trajectory_id": str(trajectory.pk), "value": 0.75, "source": "user", "idempotency_key": "k1"},
            format="json",
        )
        review = operator.post(
            REVIEWS, {"trajectory_id": str(trajectory.pk), "status": "approved"}, format="json"
        )
    assert reward.status_code == 201, reward.content
    assert review.status_code == 201, review.content

    (exported,) = _export(operator)
    assert [step["versions"]["prompt_version"] for step in exported["steps"]] == ["h3", "h3"]
    assert exported["steps"][0]["versions"]["tools"] == {"get_time": "2"}
    assert exported["steps"][0]["state"] == harness
    assert exported["steps"][1]["result"]["error"] == {"type": "aborted", "message": "the client went away"}
    assert exported["governance"]["review"]["status"] == "approved"
    # The abandoned last call is what holds it back: the copy must be judged on the same facts.
    assert exported["governance"]["qualification"]["reasons"] == ["not_retry_orphan"]

    their_operator = api_client(["trajectories:read", "trajectories:write"], of=other_tenant)
    with gates_run_on_commit():
        exported, _ = _move(operator, their_operator, {}, to_tenant=other_tenant)
    (copy,) = _export(their_operator)
    _assert_faithful(exported, copy)
    copied_step = Step.objects.get(tenant=other_tenant, pk=aborted["step_id"])
    assert (copied_step.aborted, copied_step.error) == (True, "the client went away")


def test_a_copy_within_one_deployment_is_refused_by_field_and_stores_nothing(
    api_client, tenant, other_tenant
):
    writer, reader = api_client(["trajectories:write"]), api_client(["trajectories:read"])
    assert _import(writer, _jsonl(_rich_record(tenant))).json()["accepted"] == 1
    (exported,) = _export(reader)
    response = _import(
        api_client(["trajectories:write"], of=other_tenant), _jsonl(dict(exported, tenant=other_tenant.slug))
    )
    assert response.status_code == 400
    fields = {entry["field"] for entry in response.json()["rejected"]}
    assert {f"steps[{position}].step_id" for position in range(5)} <= fields
    assert {"rewards[0].reward_id", "rewards[1].reward_id"} <= fields
    assert not Trajectory.objects.for_tenant(other_tenant).exists()
    assert Step.objects.for_tenant(tenant).count() == 5


def test_bad_lines_are_refused_by_line_and_field_and_the_good_ones_kept(api_client, tenant, other_tenant):
    writer = api_client(["trajectories:write"])
    good = _rich_record(tenant)
    short_mask = atdp_record(tenant, "short-mask")
    short_mask["steps"][0]["tokens"]["loss_mask"] = [1, 0]
    long_version = atdp_record(tenant, "long-version")
    long_version["steps"][3]["versions"]["model_version"] = "v" * 65
    long_agent = atdp_record(tenant, "long-agent")
    long_agent["agent"]["version"] = "9" * 65
    long_agent["rewards"][0]["created_by"] = "r" * 201
    costly = atdp_record(tenant, "costly")
    costly["steps"][0]["cost"]["prompt_tokens"] = 2**31
    also_good = atdp_record(tenant, "also-good")
    body = _jsonl(short_mask, good, long_version, long_agent, costly, also_good)

    response = _import(writer, body)
    assert response.status_code == 200, response.content
    report = response.json()
    assert [entry["line"] for entry in report["stored"]] == [2, 6]
    refused = {(entry["line"], entry["field"]): entry["message"] for entry in report["rejected"]}
    assert set(refused) == {
        (1, "steps[0].tokens.loss_mask"),
        (3, "steps[3].versions.model_version"),
        (4, "agent.version"),
        (4, "rewards[0].created_by"),
        (5, "steps[0].cost.prompt_tokens"),
    }
    assert "64" in refused[(3, "steps[3].versions.model_version")]
    assert "200" in refused[(4, "rewards[0].created_by")]
    assert set(Trajectory.objects.for_tenant(tenant).values_list("session_id", flat=True)) == {
        "rich-session",
        "also-good",
    }
    assert not Trajectory.objects.for_tenant(other_tenant).exists()


def test_an_import_keeps_its_retention_date_only_up_to_the_tenant_policy(api_client, tenant):
    tenant.policy.retention_days = 10
    tenant.policy.save()
    writer, reader = api_client(["trajectories:write"]), api_client(["trajectories:read"])
    sooner, later = atdp_record(tenant, "sooner"), atdp_record(tenant, "later")
    sooner["governance"]["retention_until"] = _in_the_future(5)
    later["governance"]["retention_until"] = _in_the_future(400)
    assert _import(writer, _jsonl(sooner, later)).json()["accepted"] == 2

    exported = {record["session_id"]: record for record in _export(reader)}
    assert exported["sooner"]["governance"]["retention_until"] == sooner["governance"]["retention_until"]
    kept = Trajectory.objects.get(tenant=tenant, session_id="later").retention_until
    assert timezone.now() + timedelta(days=9) < kept <= timezone.now() + timedelta(days=10)
    shortened = AuditEvent.objects.get(tenant=tenant, verb="trajectory.import", data__session_id="later")
    assert shortened.data["retention_shortened"] is True


def test_an_export_reports_only_its_own_tenant_s_review_and_verdict(api_client, tenant, other_tenant):
    """Reviews and verdicts are read by tenant, not by trajectory id alone: a planted row of another tenant
    naming this trajectory never shows in its governance."""
    from apps.qualification.models import Qualification

    writer, reader = api_client(["trajectories:write"]), api_client(["trajectories:read"])
    record = atdp_record(tenant, "guarded")
    record["governance"]["review"] = {"status": "unreviewed", "reviewer": None, "at": None, "note": None}
    assert _import(writer, _jsonl(record)).json()["accepted"] == 1
    mine = Trajectory.objects.get(tenant=tenant, session_id="guarded")
    Review.objects.create(tenant=other_tenant, trajectory=mine, status="rejected", reviewer_label="intruder")
    Qualification.objects.create(tenant=other_tenant, trajectory=mine, status="qualified")

    (exported,) = _export(reader)
    assert exported["governance"]["review"] == {
        "status": "unreviewed",
        "reviewer": None,
        "at": None,
        "note": None,
    }
    assert exported["governance"]["qualification"] == {"status": "pending", "reasons": [], "at": None}
    detail = reader.get(f"/api/v1/trajectories/{mine.pk}/").json()
    assert detail["governance"] == exported["governance"]
    assert uuid.UUID(detail["trajectory_id"]) == mine.pk
