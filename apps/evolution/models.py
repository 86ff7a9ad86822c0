"""The evolution control plane's tables: a policy per tenant and agent, the signal time series and tool-failure
clusters it watches, the decisions it takes (with their evidence and approvals) and the harness versions it
can propose. See README.md for the life of each row."""

from django.db import models
from django.utils import timezone

from apps.core.models import TenantOwned, TimestampedTenantOwned
from apps.evolution.choices import (  # noqa: F401 (re-exported)
    OPEN_DECISION_STATUSES,
    ApprovalMode,
    ClusterKind,
    DecisionKind,
    DecisionStatus,
    HarnessProposer,
    PolicyMode,
    UpdateKind,
)


class EvolutionPolicy(TimestampedTenantOwned):
    """How one agent of a tenant evolves: the signals that matter (thresholds), the update kinds allowed, the
    training recipe, the evaluation gate, the release plan, the approval mode, cool-down and daily budget.
    Validated by `policies.validate_policy` (every write goes through `policies.policy_create/update`)."""

    agent_name = models.CharField(max_length=200, blank=True, help_text="Trajectory.agent_name; blank: all.")
    model = models.CharField(
        max_length=200, help_text="The served model name it evolves (ModelVersion.name)."
    )
    mode = models.CharField(max_length=16, choices=PolicyMode.choices, default=PolicyMode.OBSERVE)
    enabled = models.BooleanField(default=True)
    window_seconds = models.PositiveIntegerField(default=600, help_text="The sliding window of the signals.")
    signals = models.JSONField(default=dict, blank=True, help_text='{"signal": {"op": ">", "threshold": x}}')
    update_kinds = models.JSONField(default=list, blank=True, help_text='["weights", "harness"]')
    recipe = models.JSONField(default=dict, blank=True, help_text="The online run's settings.")
    gate = models.JSONField(default=dict, blank=True, help_text="Offline evaluation gate.")
    release_plan = models.JSONField(default=dict, blank=True, help_text="Canary stages and guardrails.")
    approval_mode = models.CharField(
        max_length=16, choices=ApprovalMode.choices, default=ApprovalMode.ONE_OPERATOR
    )
    cooldown_seconds = models.PositiveIntegerField(default=300)
    compute_budget_seconds = models.PositiveIntegerField(default=3600, help_text="Training seconds per day.")
    decision_ttl_seconds = models.PositiveIntegerField(default=3600, help_text="A proposal expires after it.")
    harness_proposer = models.CharField(
        max_length=16, choices=HarnessProposer.choices, default=HarnessProposer.RULE
    )
    harness_model = models.CharField(
        max_length=200, blank=True, help_text="The served model that rewrites prompts (proposer model)."
    )
    revision = models.PositiveIntegerField(default=1, help_text="Bumped by every edit (optimistic locking).")
    updated_by = models.CharField(max_length=150, blank=True)
    last_tick_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "evolution_policy"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent_name", "model"], name="evolution_policy_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.model}/{self.agent_name or '*'} ({self.mode})"


class SignalPoint(TenantOwned):
    """One value of one signal for one policy at one tick (a time series). `value` is null when the window had
    no data for it; `details` carries the inputs (counts, by-source breakdowns, the compared distributions)."""

    policy = models.ForeignKey(EvolutionPolicy, on_delete=models.CASCADE, related_name="signal_points")
    name = models.CharField(max_length=64)
    value = models.FloatField(null=True, blank=True)
    window_seconds = models.PositiveIntegerField()
    details = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "evolution_signal_point"
        indexes = [models.Index(fields=["tenant", "policy", "name", "at"], name="evolution_signal_series")]


class ToolFailureCluster(TimestampedTenantOwned):
    """Failed tool results and malformed tool calls of one policy's traffic, grouped by tool, error signature
    and argument shape (workers.evolution.clusters)."""

    policy = models.ForeignKey(EvolutionPolicy, on_delete=models.CASCADE, related_name="clusters")
    tool = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=ClusterKind.choices)
    signature = models.CharField(max_length=300)
    argument_shape = models.CharField(max_length=300, blank=True)
    count = models.PositiveIntegerField(default=0)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    examples = models.JSONField(
        default=list, blank=True, help_text="Trajectory ids, newest last (at most 10)."
    )
    example_arguments = models.JSONField(default=list, blank=True, help_text="Arguments of those calls.")

    class Meta:
        db_table = "evolution_tool_failure_cluster"
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "tool", "kind", "signature", "argument_shape"],
                name="evolution_cluster_unique",
            ),
        ]


class Decision(TimestampedTenantOwned):
    """What the control plane decided for one policy, why (`evidence`: the signals and thresholds that fired,
    clusters, example trajectories), who approved it, what it started and how it ended."""

    policy = models.ForeignKey(EvolutionPolicy, on_delete=models.CASCADE, related_name="decisions")
    kind = models.CharField(max_length=24, choices=DecisionKind.choices)
    status = models.CharField(max_length=16, choices=DecisionStatus.choices, default=DecisionStatus.PROPOSED)
    reason = models.CharField(max_length=500)
    evidence = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    version = models.ForeignKey(
        "training.ModelVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    harness = models.ForeignKey(
        "evolution.HarnessVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approvals_required = models.PositiveSmallIntegerField(default=0)
    approvals = models.JSONField(default=list, blank=True, help_text='[{"actor", "kind", "id", "at"}]')
    decided_by = models.CharField(max_length=150, help_text="The policy, or the person who asked for it.")
    rejected_by = models.CharField(max_length=150, blank=True)
    started = models.JSONField(
        default=dict, blank=True, help_text='{"online_runs": [...], "releases": [...]}'
    )
    outcome = models.CharField(max_length=500, blank=True)
    policy_revision = models.PositiveIntegerField(default=1)
    expires_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "evolution_decision"
        indexes = [models.Index(fields=["tenant", "policy", "status"], name="evolution_decision_open")]
        ordering = ["-created_at", "-id"]


class HarnessVersion(TimestampedTenantOwned):
    """A versioned agent harness the gateway applies to an unmodified agent's requests: a system-prompt revision,
    memory exemplars and tool routing. Attached to a model version (`training.ModelVersion.harness`), it goes
    through the same evaluation, canary, approval and rollback as weights. Applied only to requests of its
    `agent_name` (blank: every agent); numbered per tenant and model, so a label names one harness."""

    model = models.CharField(max_length=200)
    agent_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="The agent (Trajectory.agent_name) whose requests get it; blank: every agent of the model.",
    )
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    system_prompt = models.TextField(blank=True, help_text="Added before the agent's own system prompt.")
    exemplars = models.JSONField(
        default=list,
        blank=True,
        help_text='[{"situation", "messages": [...], "trajectory": source id (taken from traffic)}]',
    )
    quotes_traffic = models.BooleanField(
        default=False,
        help_text="Adds text taken from recorded conversations: a person approves it before it is evaluated.",
    )
    tool_routing = models.JSONField(
        default=dict, blank=True, help_text='{"tool": {"action", "to", "version"}}'
    )
    tool_versions = models.JSONField(
        default=dict, blank=True, help_text='{"tool": "version"}, recorded in ATDP.'
    )
    proposer = models.CharField(max_length=40, blank=True, help_text="rule, model, or a person.")
    rationale = models.TextField(blank=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        db_table = "evolution_harness_version"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "model", "number"], name="evolution_harness_unique"),
        ]

    @property
    def label(self) -> str:
        return f"h{self.number}"

    def __str__(self) -> str:
        return f"{self.model} {self.label}"
