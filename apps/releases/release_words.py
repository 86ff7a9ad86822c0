"""A release in words, as the console names and summarises it: by what it releases ("release of v3 over v2"),
never by its database id, and where it stands or how it ended in a sentence ("v3 takes 25 % of new sessions
(stage 2 of 4); the last tick passed"). Pure functions of the release row."""

from apps.releases.choices import ReleaseStatus

# The last analysis tick's verdict, as the sentence says it.
VERDICT_WORDS = {
    "successful": "passed",
    "failed": "failed",
    "inconclusive": "was inconclusive",
}


def release_title(release) -> str:
    """A release named by what it releases: "release of v3 over v2"."""
    return f"release of v{release.candidate.number} over v{release.baseline.number}"


def release_name(release) -> str:
    """A release named by the version it releases, as the serving history's reasons say it: "release of v3"."""
    return f"release of v{release.candidate.number}"


def _reason(release) -> str:
    reason = release.status_reason.rstrip(". ")
    return f": {reason}" if reason else ""


def release_outcome(release) -> str:
    """Where the release stands, or how it ended, in a sentence with its versions and share of traffic."""
    candidate, baseline = f"v{release.candidate.number}", f"v{release.baseline.number}"
    status = release.status
    if status == ReleaseStatus.DRAFT:
        return f"{candidate} over {baseline}, drafted: not started yet."
    if status == ReleaseStatus.EVALUATING:
        return f"{candidate} and {baseline} are evaluated offline; the canary starts once the runs pass."
    stage = f"{release.stage_percent:g} % of new sessions"
    of_stages = f" (stage {release.stage_index + 1} of {len(release.stages)})" if release.stages else ""
    if status == ReleaseStatus.CANARY:
        verdict = VERDICT_WORDS.get(release.last_verdict)
        tick = f"; the last tick {verdict}" if verdict else "; no tick analysed yet"
        return f"{candidate} takes {stage}{of_stages}{tick}."
    if status == ReleaseStatus.PAUSED:
        return (
            f"Paused with {candidate} on {stage}: the guardrails stayed inconclusive; an operator resumes or "
            "rolls it back."
        )
    if status == ReleaseStatus.AWAITING_APPROVAL:
        return f"{candidate} passed every stage up to {stage}; it awaits approval to replace {baseline}."
    if status == ReleaseStatus.PROMOTED:
        by = f" by {release.approved_by}" if release.approved_by else ""
        return f"{candidate} promoted to production{by}; {baseline} retired."
    if status == ReleaseStatus.ROLLED_BACK:
        return f"Rolled back to {baseline}{_reason(release)}."
    if status == ReleaseStatus.ABORTED:
        return f"Aborted; {baseline} serves every session{_reason(release)}."
    return f"{candidate} over {baseline}: {status.replace('_', ' ')}."
