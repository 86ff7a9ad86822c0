"""ATDP imports (SDK mode): a record's trajectory and steps (apps.trajectories), its rewards (apps.rewards) and
its current review (apps.qualification), stored together in one transaction per record."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import DataError, IntegrityError, transaction

from apps.core.errors import DomainError
from apps.qualification.services import review_import
from apps.rewards.selectors import reward_import_conflicts
from apps.rewards.services import rewards_import
from apps.tenants.models import Tenant
from apps.trajectories import importing
from apps.trajectories.selectors import trajectory_import_conflicts
from apps.trajectories.services import trajectory_import_audit, trajectory_import_store
from workers.atdp.jsonl import ImportLine


@transaction.atomic
def trajectory_import(*, tenant: Tenant, record: dict, actor):
    """Stores one validated ATDP trajectory logged by an agent itself, audited as `trajectory.import`: its
    trajectory and steps through `apps.trajectories.services.trajectory_import_store` (which says what is kept
    and what is refused), its rewards through `apps.rewards.services.rewards_import` and its current review
    through `apps.qualification.services.review_import`. Returns the stored trajectory."""
    trajectory, retention_shortened = trajectory_import_store(tenant=tenant, record=record)
    rewards_import(tenant=tenant, trajectory=trajectory, rewards=record.get("rewards") or [])
    review = (record.get("governance") or {}).get("review") or {}
    review_import(
        tenant=tenant,
        trajectory=trajectory,
        review=review,
        recorded_at=importing.moment(review["at"]) if review.get("at") else None,
    )
    trajectory_import_audit(
        tenant=tenant,
        actor=actor,
        trajectory=trajectory,
        record=record,
        retention_shortened=retention_shortened,
    )
    return trajectory


def record_import_conflicts(*, tenant: Tenant, record: dict) -> dict[str, str]:
    """Field paths of a valid ATDP `record` that clash with stored data: its steps' (apps.trajectories) and its
    rewards' (apps.rewards). Empty: no clash."""
    return {
        **trajectory_import_conflicts(tenant=tenant, record=record),
        **reward_import_conflicts(tenant=tenant, rewards=record.get("rewards") or []),
    }


@dataclass(frozen=True)
class ImportedLine:
    line: int
    trajectory: Any  # the stored apps.trajectories Trajectory


@dataclass(frozen=True)
class RefusedLine:
    line: int
    field: str  # the failing field's path in the record ("" for the line as a whole)
    message: str


@dataclass(frozen=True)
class TrajectoryImportReport:
    stored: list[ImportedLine]
    rejected: list[RefusedLine]


def _refusals(line_number: int, error: DomainError) -> list[RefusedLine]:
    """One refusal per field the service named (its message when it named one field, else each field's
    problems), or one at `trajectory_id` when it named none."""
    if len(error.fields) <= 1:
        field = next(iter(error.fields), "trajectory_id")
        return [RefusedLine(line=line_number, field=field, message=error.message)]
    return [
        RefusedLine(line=line_number, field=field, message="; ".join(problems))
        for field, problems in error.fields.items()
    ]


def trajectories_import(*, tenant: Tenant, actor, lines: Iterable[ImportLine]) -> TrajectoryImportReport:
    """Stores the valid lines of an ATDP JSON Lines import (`workers.atdp.jsonl.read_jsonl`) for `tenant`,
    each through `trajectory_import` in its own transaction (one `trajectory.import` audit event per stored
    trajectory): a bad line is reported and never costs the good ones. A line is refused with its problems
    when it is not a valid record, with each field the service names when it refuses it (another tenant's
    record, a value too long for its column, an id or session this tenant already holds), with each
    clashing field (`record_import_conflicts`) when a step or reward id, or a reward
    idempotency key, turns out to be taken, and as a whole when a value no check foresaw does not fit
    its column. Not idempotent: the same lines again are refused as existing trajectories."""
    stored: list[ImportedLine] = []
    rejected: list[RefusedLine] = []
    for line in lines:
        if line.record is None:  # not a valid record: its problems say why
            rejected.extend(
                RefusedLine(line=line.line_number, field=problem.path, message=problem.message)
                for problem in line.problems
            )
            continue
        try:
            trajectory = trajectory_import(tenant=tenant, record=line.record, actor=actor)
        except DomainError as error:
            rejected.extend(_refusals(line.line_number, error))
        except IntegrityError:  # a step or reward id, or a reward idempotency key, is taken: say which
            conflicts = record_import_conflicts(tenant=tenant, record=line.record) or {
                "": "an id or reward idempotency key of this record was stored meanwhile"
            }
            rejected.extend(
                RefusedLine(line=line.line_number, field=field, message=message)
                for field, message in conflicts.items()
            )
        except DataError as error:  # a value no check foresaw does not fit its column: the line alone goes
            rejected.append(
                RefusedLine(line=line.line_number, field="", message=f"a value does not fit: {error}"[:300])
            )
        else:
            stored.append(ImportedLine(line=line.line_number, trajectory=trajectory))
    return TrajectoryImportReport(stored=stored, rejected=rejected)
