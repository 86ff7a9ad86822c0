"""`make demo`: the self-evolving agent loop end to end on the embedded default.

State: the demo keeps its own state in var/demo (SQLite database, broker, models, checkpoints), apart
from `make run`'s var/. A second `make demo` RESETS var/demo and starts from scratch (DEMO_KEEP=1 keeps
the previous database instead and adds a new run to it: its model is then `weather-2`, `weather-3`...).

Steps: create the default model; supervised warm-up (a weak but nonzero base: the skills, not the habit);
register it as version 0 (production); start web, workers, beat and two embedded inference servers (serving
slots A and B: production on one, a canary candidate on the other); measure the base on the held-out cases;
create the weather agent's evolution policy (apps.evolution: automatic; recipe, gate and canary plan from
the DEMO_* settings) and start its first learner through a `train` decision: an online decoupled-PPO run
(η > 0) on the train worker that registers a new version every K steps but serves none itself. Simulated
users drive the unmodified openai-SDK agent through the gateway with a fresh API key and give thumbs and
corrections through /v1/rewards; a simulated annotator signs in and labels a share of the annotation queue
through the annotation API; qualification feeds the training queue. From then on the control plane decides,
ticked by the demo every second: every DEMO_EVAL_EVERY versions the newest is evaluated on the held-out cases
by the eval worker; one not worse (within DEMO_TOLERANCE) than the best version production has had is loaded
onto the free slot and released (a canary at DEMO_CANARY_PERCENT of new sessions for at least
DEMO_CANARY_SECONDS under guardrails, measured by the beat's analysis ticks, which roll a bad candidate
back); one that is worse, or rolled back, restarts the learner from production. A release awaiting approval
is promoted by the policy or, with DEMO_APPROVE=manual, waits for an operator (the release's or the
decision's Approve in the console). Each decision is a line of the timeline; the table at the end has the
held-out success of the base and of every evaluated or released version, trajectories and tokens used, wall
time. The console stays up afterwards (Ctrl-C stops everything); DEMO_EXIT=1 exits after the table.

The warm-up's base is kept in var/demo-cache, keyed by the seed, the warm-up settings and the initial
weights, so a second `make demo` starts its loop in seconds (DEMO_FRESH_BASE=1 trains it again).

Settings (environment): demo/config.py.
"""

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import OutputWrapper
from django.core.management.color import Style

from areal_web.processes import ProcessGroup
from demo.bfcl import BfclMixin, NoAnnotator
from demo.config import TENANT, DemoConfig
from demo.loop import LoopMixin
from demo.report import ReportMixin
from demo.stack import StackMixin
from demo.warm_up import WarmUpMixin

if TYPE_CHECKING:
    from apps.tenants.models import Tenant


class Demo(StackMixin, BfclMixin, WarmUpMixin, LoopMixin, ReportMixin):
    """One demo run in the var/demo process; its parts live in the mixins' modules, its state is all here."""

    # Set as the run goes: by _environment, _start_stack, _measure (the base) and _policy_create.
    tenant: "Tenant"
    model: str  # weather, or weather-2, weather-3... under DEMO_KEEP=1
    run_dir: Path
    backends: dict  # serving slot → apps.inference.models.InferenceBackend
    production_number: int  # the version production served when the demo last looked (the base at first)

    def __init__(
        self,
        *,
        out: OutputWrapper,
        err: OutputWrapper,
        style: Style,
        host: str,
        port: int,
        inference_port: int,
        demo_config: DemoConfig,
    ):
        self.out, self.err, self.style = out, err, style
        self.demo_config = demo_config
        self.host, self.port, self.inference_port = host, port, inference_port
        self.url = f"http://{host}:{port}"
        self.seed = demo_config.seed
        self.budget = demo_config.budget_seconds
        self.processes = ProcessGroup()
        self.slots = {"a": inference_port, "b": inference_port + 1}  # serving slots: production and canary
        self.policy = None  # the weather agent's EvolutionPolicy: the control plane decides from here on
        self.seen: dict[int, str] = {}  # decision id → the status the timeline last printed
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.loop_started: float | None = None  # set once the base is measured: the budget counts from there
        self.warmup_seconds = 0.0
        self.base_reused = False
        self.rows: list[dict] = []
        self.curve: list[dict] = []

    def run(self) -> None:
        import logging

        for noisy in ("httpx", "httpx2", "openai", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)
        traffic = annotator = world = scenario = None
        try:
            call_command("migrate", verbosity=0, interactive=False)
            call_command("bootstrap", tenant=TENANT, stdout=self.out)
            self._environment()
            base_dir = self._warm_up()
            base = self._register_base(base_dir)
            self._start_stack(base)
            self._measure(base, label="base")
            self.loop_started = time.monotonic()
            api_key = self._api_key()
            self._policy_create()
            self._first_learner()
            from demo.scenario import ScenarioDriver, scenario_world

            world = scenario_world(self.demo_config)  # DEMO_SCENARIO; None: the weather desk as it was
            traffic = self._traffic(api_key, world).start()  # DEMO_TASK=bfcl: BFCL's train split
            if world is not None:
                scenario = ScenarioDriver(
                    tenant=self.tenant, model=self.model, run_dir=self.run_dir, world=world, say=self._say
                ).start()
            annotator = NoAnnotator() if self._bfcl() else self._start_annotator(traffic)
            self._loop(traffic)
            self._close()
            traffic.stop()
            annotator.stop()
            self._table(traffic, annotator)
            if world is not None:
                from demo.scenario import scenario_summary_write

                scenario.stop()
                scenario_summary_write(
                    demo_config=self.demo_config,
                    tenant=self.tenant,
                    model=self.model,
                    world=world,
                    traffic=traffic,
                    driver=scenario,
                )
            if self.demo_config.exit_after_table or self.stopping.is_set():
                return
            self.out.write(
                self.style.SUCCESS(f"\nThe console stays up: {self.url}/  (Ctrl-C stops everything)")
            )
            while not self.stopping.is_set() and self._alive():
                self.stopping.wait(0.5)
        finally:
            if scenario is not None:
                scenario.stop(timeout=5)
            if (
                getattr(self, "tenant", None) is not None
            ):  # a release under way is aborted, the learner stopped
                self._close()
            if traffic is not None:
                traffic.stop(timeout=5)
            if annotator is not None:
                annotator.stop(timeout=5)
            self._shutdown()
            if (
                getattr(self, "tenant", None) is not None
            ):  # the worker is gone: runs it did not close are closed
                from apps.training.choices import OnlineRunStatus
                from apps.training.online import online_run_finish, online_run_list

                running = online_run_list(tenant=self.tenant).filter(
                    model_name=self.model, status=OnlineRunStatus.RUNNING
                )
                for run_id in running.values_list("pk", flat=True):
                    online_run_finish(run_id=run_id, status=OnlineRunStatus.STOPPED)

    def _stop(self, *_):
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.out.write("\nstopping (Ctrl-C again is not needed; processes are being stopped)")

    def _environment(self) -> None:
        from apps.tenants.models import Tenant
        from apps.training.models import ModelVersion

        self.tenant = Tenant.objects.get(slug=TENANT)
        name = self.demo_config.model_name  # weather, or bfcl under DEMO_TASK=bfcl
        taken = set(
            ModelVersion.objects.filter(tenant=self.tenant, name__startswith=name)
            .values_list("name", flat=True)
            .distinct()
        )
        self.model = name if name not in taken else f"{name}-{len(taken) + 1}"
        self.run_dir = Path(settings.VAR_DIR) / "runs" / self.model
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def _api_key(self) -> str:
        from apps.audit.services import Actor
        from apps.tenants.services import api_key_create

        _, raw = api_key_create(
            tenant=self.tenant,
            actor=Actor.system("demo"),
            name=f"demo-agent-{self.model}",
            scopes=["inference", "rewards:write"],
        )
        return raw

    def _start_annotator(self, traffic):
        """An annotator account (role annotator, a fresh password), a 0–1 `<model> quality` spec and a queue over the
        demo's production traffic assigned to it; the simulated annotator signs in and works the queue."""
        import secrets

        from django.contrib.auth import get_user_model

        from apps.annotation.services import annotation_queue_create
        from apps.audit.services import Actor
        from apps.core.errors import Conflict
        from apps.rewards.services import reward_spec_create
        from apps.tenants.services import membership_add
        from workers.envs.annotator import AnnotatorClient
        from workers.envs.users import SimulatedAnnotator

        actor = Actor.system("demo")
        password = secrets.token_urlsafe(12)
        user, _ = get_user_model().objects.get_or_create(username="demo-annotator")
        user.set_password(password)
        user.save()
        with contextlib.suppress(Conflict):  # DEMO_KEEP=1: a member since an earlier run
            membership_add(tenant=self.tenant, actor=actor, user_identifier=user.username, role="annotator")
        # Named after the run's model, which is new in every run (weather, weather-2...): nothing to look up.
        spec = reward_spec_create(
            tenant=self.tenant,
            actor=actor,
            name=f"{self.model} quality",
            kind="numeric",
            minimum=0.0,
            maximum=1.0,
            description="1: answered right; 0.5: right call, wrong answer",
        )
        name = f"{self.model} live traffic"
        queue = annotation_queue_create(
            tenant=self.tenant,
            actor=actor,
            name=name,
            spec_id=spec.pk,
            filters={"purpose": "production", "status": "complete"},
            annotators_per_item=1,
            assignee_ids=[user.pk],
        )
        share = self.demo_config.annotator_share
        client = AnnotatorClient(
            console_url=self.url,
            username=user.username,
            password=password,
            queue_id=queue.pk,
            outcomes=traffic.outcomes,
            annotator=SimulatedAnnotator(share=share),
            seed=self.seed,
        ).start()
        self._say(
            f"a simulated annotator ({user.username}) labels about {share:.0%} of queue "
            f"{name!r} through the annotation API"
        )
        return client
