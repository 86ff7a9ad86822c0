"""The trajectories app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class TrajectoryStatus(models.TextChoices):
    OPEN = "open"
    COMPLETE = "complete"
    ABORTED = "aborted"


class EndReason(models.TextChoices):
    """Why a trajectory ended. Blank: not recorded (still open, imported, or ended before reasons were kept)."""

    AGENT = "agent", "The agent called /rl/end_session"
    SIGNAL = "signal", "The agent sent X-Session-End on its last request"
    API = "api", "Ended through the end API or the console"
    IDLE = "idle", "No step for the tenant's session idle timeout"
    REPLAY = "replay", "The replay finished"


class Purpose(models.TextChoices):
    PRODUCTION = "production"
    EVAL = "eval"
    REPLAY = "replay"
    ANNOTATION = "annotation"


class StepKind(models.TextChoices):
    LLM_CALL = "llm_call"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    USER_MESSAGE = "user_message"
    USER_FEEDBACK = "user_feedback"
    ENV_EVENT = "env_event"
