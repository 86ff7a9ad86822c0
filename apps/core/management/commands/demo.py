"""`make demo`: the self-evolving agent loop end to end on the embedded default.

State: the demo keeps its own state in var/demo (SQLite database, broker, models, checkpoints), apart
from `make run`'s var/. A second `make demo` RESETS var/demo and starts from scratch (DEMO_KEEP=1 keeps
the previous database instead and adds a new run to it: its model is then `weather-2`, `weather-3`...).

Steps: create the default model; supervised warm-up (a weak but nonzero base: the skills, not the habit);
register it as version 0 (production); start web, workers, beat and two embedded inference servers (serving
slots A and B: production on one, a canary candidate on the other); start an online decoupled-PPO run
(η > 0) on the train worker that registers a new version every K steps but serves none itself; simulated
users drive the unmodified openai-SDK agent through the gateway with a fresh API key and give thumbs and
corrections through /v1/rewards; a simulated annotator signs in and labels a share of the annotation queue
through the annotation API; qualification feeds the training queue. Every few versions the newest is
evaluated offline on the held-out cases (workers.envs.warmup.heldout_success); one not worse (within
DEMO_TOLERANCE) than the best version production has had is loaded onto the free slot and released through
apps.releases (one that is worse restarts the learner from production: it has drifted, and its data would
soon all be older than η): a canary takes DEMO_CANARY_PERCENT of new sessions for at least
DEMO_CANARY_SECONDS under guardrails (reward mean, error rate), measured by the beat's analysis ticks,
which roll a bad candidate back; a release awaiting
approval is approved by the demo (audited as "demo auto-approval") or, with DEMO_APPROVE=manual, waits for
an operator to approve it in the console. The table at the end has held-out success of the base and of
every released version, trajectories and tokens used, wall time. The console stays up afterwards (Ctrl-C
stops everything); DEMO_EXIT=1 exits after the table.

The warm-up's base is kept in var/demo-cache, keyed by the seed, the warm-up settings and the initial
weights, so a second `make demo` starts its loop in seconds (DEMO_FRESH_BASE=1 trains it again).

Settings (environment): DEMO_SEED (0), DEMO_BUDGET_SECONDS (300: the loop's wall-time budget, counted from
the base's held-out measurement; the warm-up is timed apart), DEMO_SKILL_STEPS (200), DEMO_SFT_STEPS (60),
DEMO_SFT_LR (1e-3), DEMO_USERS (3), DEMO_HELDOUT (64 cases), DEMO_ETA (8: production lags the learner by the
versions a release takes), DEMO_BATCH (16 samples per step), DEMO_PUBLISH_EVERY (1), DEMO_EVAL_EVERY
(2 versions), DEMO_LR (1e-4), DEMO_TOLERANCE (0.05), DEMO_CANARY_PERCENT (50), DEMO_CANARY_SECONDS (10),
DEMO_ANNOTATOR_SHARE (0.3), DEMO_SUMMARY (a JSON file).
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from apps.core.management.commands.up import port_is_free, stack_environment
from areal_web.queues import Queue

MODEL = "weather"
TENANT = "demo"
DEMO_DIR_MARKER = ".areal-demo"


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def bar(done: float, total: float, width: int = 28) -> str:
    filled = int(width * min(max(done / total, 0.0), 1.0)) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class Command(BaseCommand):
    help = (
        "Runs the self-evolving demo: warm-up, live traffic, rewards, qualification, online decoupled PPO, "
        "held-out evaluation and promotion, then a table. A second run RESETS var/demo (DEMO_KEEP=1 keeps "
        "it and adds a run). DEMO_EXIT=1 exits after the table; DEMO_APPROVE=manual asks an operator."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument(
            "--inference-port", type=int, default=int(os.environ.get("AREAL_INFERENCE_PORT", "8100"))
        )

    def handle(self, *args, host, port, inference_port, **options):
        for name, wanted in (
            ("PORT", port),
            ("AREAL_INFERENCE_PORT", inference_port),
            ("AREAL_INFERENCE_PORT (+1: serving slot B)", inference_port + 1),
        ):
            if not port_is_free(host, wanted):
                raise CommandError(
                    f"port {wanted} on {host} is already in use; stop what holds it or set {name}=<free port>"
                )
        demo_dir = Path(os.environ.get("DEMO_VAR_DIR", settings.BASE_DIR / "var" / "demo")).resolve()
        if Path(settings.VAR_DIR).resolve() != demo_dir:
            self._reexec(demo_dir)  # settings are read at import: run again with AREAL_VAR_DIR=demo_dir
            return
        Demo(self, host=host, port=port, inference_port=inference_port).run()

    def _reexec(self, demo_dir: Path) -> None:
        keep = os.environ.get("DEMO_KEEP") == "1"
        if demo_dir.exists() and not keep:
            if (demo_dir / DEMO_DIR_MARKER).exists() or not any(demo_dir.iterdir()):
                self.stdout.write(f"resetting {demo_dir} (DEMO_KEEP=1 keeps it)")
                shutil.rmtree(demo_dir)
            else:
                raise CommandError(
                    f"{demo_dir} exists and is not a demo directory; remove it or set DEMO_VAR_DIR"
                )
        demo_dir.mkdir(parents=True, exist_ok=True)
        (demo_dir / DEMO_DIR_MARKER).touch()
        environment = {
            **os.environ,
            "AREAL_VAR_DIR": str(demo_dir),
            "DEMO_VAR_DIR": str(demo_dir),
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "areal_web.settings.local"),
        }
        environment.setdefault("AREAL_RELEASE_ANALYSIS_SECONDS", "3")  # canary ticks: seconds, not a minute
        environment.setdefault("AREAL_ANNOTATION_FILL_SECONDS", "5")
        environment.pop("AREAL_TRAINING_DIR", None)
        environment.pop("AREAL_MODELS_DIR", None)
        manage = Path(settings.BASE_DIR) / "manage.py"
        os.execve(sys.executable, [sys.executable, str(manage), "demo", *sys.argv[2:]], environment)


class Demo:
    def __init__(self, command: BaseCommand, *, host: str, port: int, inference_port: int):
        self.out, self.err, self.style = command.stdout, command.stderr, command.style
        self.host, self.port, self.inference_port = host, port, inference_port
        self.url = f"http://{host}:{port}"
        self.seed = _env_int("DEMO_SEED", 0)
        self.budget = _env_float("DEMO_BUDGET_SECONDS", 300)
        self.processes: dict[str, subprocess.Popen] = {}
        self.slots = {"a": inference_port, "b": inference_port + 1}  # serving slots: production and canary
        self.release = None  # the release under way (apps.releases.models.Release)
        self.learner = None  # the online run now learning (a rejected candidate restarts it from production)
        self.run_ids: list[int] = []
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.loop_started: float | None = None  # set once the base is measured: the budget counts from there
        self.warmup_seconds = 0.0
        self.base_reused = False
        self.rows: list[dict] = []
        self.curve: list[dict] = []

    # ---- the run ---------------------------------------------------------------------------------------

    def run(self) -> None:
        import logging

        for noisy in ("httpx", "httpx2", "openai", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)
        traffic = annotator = None
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
            self.learner = self._start_online(base)
            from workers.envs.traffic import Traffic

            traffic = Traffic(
                gateway_url=self.url,
                api_key=api_key,
                model=self.model,
                users=_env_int("DEMO_USERS", 3),
                seed=self.seed,
            ).start()
            annotator = self._start_annotator(traffic)
            self._loop(traffic)
            traffic.stop()
            annotator.stop()
            self._stop_online(self.learner)
            self._table(traffic, annotator)
            if os.environ.get("DEMO_EXIT") == "1" or self.stopping.is_set():
                return
            self.out.write(
                self.style.SUCCESS(f"\nThe console stays up: {self.url}/  (Ctrl-C stops everything)")
            )
            while not self.stopping.is_set() and self._alive():
                self.stopping.wait(0.5)
        finally:
            if self.release is not None:  # stopped or failed during a release: production keeps serving
                self._release_close()
            if traffic is not None:
                traffic.stop(timeout=5)
            if annotator is not None:
                annotator.stop(timeout=5)
            if self.learner is not None:
                self._stop_online(self.learner)
            self._shutdown()
            if self.learner is not None:  # the worker is gone: a run it did not close is closed here
                from apps.training.models import OnlineRunStatus
                from apps.training.online import online_run_finish

                online_run_finish(run_id=self.learner.pk, status=OnlineRunStatus.STOPPED)

    def _stop(self, *_):
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.out.write("\nstopping (Ctrl-C again is not needed; processes are being stopped)")

    def _environment(self) -> None:
        from apps.tenants.models import Tenant
        from apps.training.models import ModelVersion

        self.tenant = Tenant.objects.get(slug=TENANT)
        taken = set(
            ModelVersion.objects.filter(tenant=self.tenant, name__startswith=MODEL)
            .values_list("name", flat=True)
            .distinct()
        )
        self.model = MODEL if MODEL not in taken else f"{MODEL}-{len(taken) + 1}"
        self.run_dir = Path(settings.VAR_DIR) / "runs" / self.model
        self.run_dir.mkdir(parents=True, exist_ok=True)
        from workers.envs import weather

        self.heldout = weather.make_tasks(
            split="heldout", count=_env_int("DEMO_HELDOUT", 64), seed=10_000 + self.seed
        )

    def _say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def _warm_up(self) -> Path:
        import hashlib

        from workers.envs.warmup import train_base
        from workers.inference.modelgen import create_default_model

        steps = _env_int("DEMO_SFT_STEPS", 60)
        skill_steps = _env_int("DEMO_SKILL_STEPS", 200)
        learning_rate = _env_float("DEMO_SFT_LR", 1e-3)
        started = time.monotonic()
        initial = self.run_dir / "initial"
        base_dir = self.run_dir / "base"
        self._say(f"creating the default model (seed {self.seed})")
        create_default_model(initial, seed=self.seed)
        weights = hashlib.sha256((initial / "model.safetensors").read_bytes()).hexdigest()[:12]
        cached = (
            Path(settings.VAR_DIR).parent
            / "demo-cache"
            / f"base-{weights}-skill{skill_steps}-sft{steps}-lr{learning_rate:g}-seed{self.seed}"
        )
        if (cached / "model.safetensors").exists() and os.environ.get("DEMO_FRESH_BASE") != "1":
            shutil.copytree(cached, base_dir)
            self.base_reused = True
            self._say(
                f"warm-up: reusing the base trained by an earlier run ({cached}; DEMO_FRESH_BASE=1 retrains)"
            )
            return base_dir
        self._say(
            f"warm-up: SFT on {skill_steps} batches of short scripted episodes (the skills), then {steps} of "
            f"the legacy agent's logs (its habit): a weak base"
        )

        def progress(step, total, loss):
            if self.stopping.is_set():
                raise CommandError("stopped during the warm-up; nothing was registered")
            self.out.write(f"\r  warm-up {bar(step, total)} {step}/{total} loss {loss:.3f}", ending="")
            self.out.flush()

        train_base(
            initial,
            base_dir,
            steps=steps,
            batch_size=16,
            learning_rate=learning_rate,
            skill_steps=skill_steps,
            seed=self.seed,
            progress=progress,
        )
        self.out.write("")
        self.warmup_seconds = time.monotonic() - started
        partial = cached.with_name(cached.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(base_dir, partial)
        shutil.rmtree(cached, ignore_errors=True)
        partial.rename(cached)
        return base_dir

    def _register_base(self, base_dir: Path):
        from apps.audit.services import Actor
        from apps.training.models import VersionStatus
        from apps.training.services import alias_move, model_version_register, model_version_set_status
        from workers.inference.modelgen import tokenizer_fingerprint

        actor = Actor.system("demo")
        base = model_version_register(
            tenant=self.tenant,
            actor=actor,
            name=self.model,
            checkpoint_path=str(base_dir),
            tokenizer_hash=tokenizer_fingerprint(base_dir),
            description="demo base: SFT on the legacy agent's logs",
        )
        base = model_version_set_status(
            tenant=self.tenant,
            actor=actor,
            version_id=base.pk,
            status=VersionStatus.PRODUCTION,
            reason="demo base",
        )
        alias_move(
            tenant=self.tenant,
            actor=actor,
            name=self.model,
            alias="production",
            version=base,
            reason="demo base",
        )
        self._say(f"registered {self.model} v{base.number} (the base) as production")
        return base

    def _start_stack(self, base) -> None:
        python = sys.executable
        environment = stack_environment(
            {**os.environ, "AREAL_GATEWAY_URL": self.url}, host=self.host, inference_ports=self.slots.values()
        )
        service_queues = ",".join(queue.value for queue in Queue if queue != Queue.TRAIN)
        commands = {
            "web": [
                python,
                "-m",
                "uvicorn",
                "areal_web.asgi:application",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "worker",
                "-Q",
                service_queues,
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
                "-n",
                "demo@%h",
            ],
            "trainer": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "worker",
                "-Q",
                Queue.TRAIN.value,
                "--concurrency",
                "1",
                "--loglevel",
                "WARNING",
                "-n",
                "demo-train@%h",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "beat",
                "--loglevel",
                "WARNING",
                "-s",
                str(settings.CELERY_BEAT_SCHEDULE_FILENAME),
            ],
        }
        for slot, port in self.slots.items():
            commands[f"inference-{slot}"] = [
                python,
                "-m",
                "workers.inference.server",
                "--model",
                base.checkpoint_path,
                "--host",
                self.host,
                "--port",
                str(port),
                "--served-model-name",
                self.model,
                "--model-version",
                str(base.number),
            ]
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(exist_ok=True)
        for name, command in commands.items():
            log = open(logs / f"{name}.log", "ab")  # noqa: SIM115  (closed with the process)
            self.processes[name] = subprocess.Popen(
                command, env=environment, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )
        self._say(
            f"started web, worker, trainer, beat and two embedded inference servers (serving slots A and "
            f"B; logs: {logs})"
        )
        from apps.audit.services import Actor
        from apps.inference.models import InferenceBackend
        from apps.releases.services import routing_initialize

        for slot, port in self.slots.items():
            self._wait_http(f"http://{self.host}:{port}/health", f"inference server {slot.upper()}")
            call_command(
                "registerbackend",
                TENANT,
                name=f"embedded-{self.model}-{slot}",
                url=f"http://{self.host}:{port}",
                kind="embedded",
                model=self.model,
                model_version=str(base.number),
                stdout=open(os.devnull, "w"),  # noqa: SIM115 (the server process keeps it)
            )
        backends = InferenceBackend.objects.for_tenant(self.tenant)
        self.backends = {slot: backends.get(name=f"embedded-{self.model}-{slot}") for slot in self.slots}
        routing_initialize(
            tenant=self.tenant, actor=Actor.system("demo"), version=base, reason="demo: the base serves"
        )
        self._wait_http(f"{self.url}/health", "web", fallback=f"{self.url}/")
        credentials = Path(settings.VAR_DIR) / "first-start-credentials.txt"
        login = credentials.read_text().strip().replace("\n", ", ") if credentials.exists() else "admin"
        self.out.write(self.style.SUCCESS(f"console: {self.url}/  login: {login}"))

    def _wait_http(self, url: str, what: str, *, fallback: str | None = None, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            for candidate in filter(None, (url, fallback)):
                try:
                    if httpx.get(candidate, timeout=2).status_code < 500:
                        return
                except httpx.HTTPError:
                    pass
            if not self._alive():
                raise CommandError(f"a process stopped while waiting for the {what}; see var/demo/logs")
            time.sleep(0.5)
        if not self.stopping.is_set():
            raise CommandError(f"the {what} did not answer at {url}")

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

    def _start_online(self, base):
        from apps.audit.services import Actor
        from apps.training.online import online_run_start

        eta = _env_int("DEMO_ETA", 8)
        batch = _env_int("DEMO_BATCH", 16)
        run = online_run_start(
            tenant=self.tenant,
            actor=Actor.system("demo"),
            base_version=base,
            hyperparameters={
                "learning_rate": _env_float("DEMO_LR", 1e-4),
                "std_level": "batch",
                "behaviour_weight_cap": 5.0,
                "micro_batch_tokens": 8192,
                "seed": self.seed,
            },
            samples_per_step=batch,
            publish_every=_env_int("DEMO_PUBLISH_EVERY", 1),
            staleness_bound=eta,
            publish_to_backends=False,
        )
        self.run_ids.append(run.pk)
        self._say(
            f"online decoupled PPO from v{base.number}: η={eta}, {batch} samples per step, a version every "
            f"{run.publish_every} step(s); releases decide what serves"
        )
        return run

    def _restart_learner(self) -> None:
        """A candidate failed the offline gate: the learner has drifted, and its data (served by production,
        now ever further behind it) would soon all be older than η. It starts again from production."""
        from apps.training.models import OnlineRun, OnlineRunStatus

        self._stop_online(self.learner)
        deadline = time.monotonic() + 120
        while OnlineRun.objects.filter(pk=self.learner.pk, status=OnlineRunStatus.RUNNING).exists():
            if time.monotonic() > deadline or self.stopping.is_set():
                raise CommandError(f"online run {self.learner.pk} did not stop within two minutes")
            time.sleep(0.5)
        self.learner = self._start_online(self.production[0])

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
        share = _env_float("DEMO_ANNOTATOR_SHARE", 0.3)
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

    def _stop_online(self, run) -> None:
        from apps.audit.services import Actor
        from apps.training.online import online_run_stop

        online_run_stop(tenant=self.tenant, actor=Actor.system("demo"), run_id=run.pk)

    # ---- the loop ----------------------------------------------------------------------------------------

    def _loop(self, traffic) -> None:
        """Every DEMO_EVAL_EVERY versions (while no release is under way) the newest is evaluated offline and,
        if not worse than production within DEMO_TOLERANCE, released; a release under way is followed."""
        from apps.training.online import online_run_get

        eval_every = _env_int("DEMO_EVAL_EVERY", 2)
        last_evaluated = self.learner.base_version.number
        while not self.stopping.is_set() and self._loop_seconds() < self.budget:
            if not self._alive():
                raise CommandError("a process of the stack exited; see var/demo/logs")
            current = online_run_get(tenant=self.tenant, run_id=self.learner.pk)
            if current.status != "running":
                raise CommandError(f"the online run stopped: {current.error[-400:]}")
            version = current.current_version
            if self.release is not None:
                self._follow_release()
            elif version.number - last_evaluated >= eval_every:
                last_evaluated = version.number
                success = self._measure(version, label="candidate")
                self._release_start(version, success)
            self._status(current, traffic)
            self.stopping.wait(1.0)
        self.out.write("")
        if self.release is not None:
            self._release_close()

    def _release_close(self) -> None:
        """The loop ended (budget, Ctrl-C or a failure) during a release: it is aborted and production keeps
        serving, so nothing is left half-done in the database."""
        from apps.audit.services import Actor
        from apps.releases.services import release_abort

        try:
            release = release_abort(
                tenant=self.tenant,
                actor=Actor.system("demo"),
                release_id=self.release.pk,
                reason="the demo's loop ended before the release finished",
            )
        except Exception as error:  # it may have finished meanwhile (promoted or rolled back): say so
            self._say(f"release {self.release.pk} was not aborted: {error}")
        else:
            self._row(release.candidate.number, "aborted", self.release_offline, release=release.pk)
            self._say(f"release {release.pk} (v{release.candidate.number}) aborted: the loop ended")
        self.release = None

    def _status(self, run, traffic) -> None:
        stats = traffic.stats
        success = stats.recent_success()
        reward = stats.recent_reward()
        elapsed = self._loop_seconds()
        line = (
            f"\r{bar(elapsed, self.budget, 20)} {elapsed:5.0f}s  v{run.current_version.number}  "
            f"steps {run.steps}  trajectories {stats.episodes}  tokens {self._tokens():,}  "
            f"prod v{self.production[0].number}  {self._release_label()}  "
            f"live success {'-' if success is None else f'{success:.0%}'}  "
            f"reward {'-' if reward is None else f'{reward:.2f}'}  stale {run.dropped_stale}  "
            f"held back {stats.held_back}   "
        )
        self.out.write(line, ending="")
        self.out.flush()

    def _release_label(self) -> str:
        """The release under way as _follow_release last read it (this loop turn)."""
        if self.release is None:
            return "no release"
        return f"release v{self.release.candidate.number}: {self.release.status}"

    def _tokens(self) -> int:
        from django.db.models import Sum

        from apps.trajectories.models import Trajectory

        totals = (
            Trajectory.objects.for_tenant(self.tenant)
            .filter(started_at__gte=self._since())
            .aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
        )
        return (totals["prompt"] or 0) + (totals["completion"] or 0)

    def _since(self):
        if not hasattr(self, "_since_at"):
            from django.utils import timezone

            self._since_at = timezone.now()
        return self._since_at

    def _measure(self, version, *, label: str) -> float:
        from apps.training.services import model_version_update_metrics
        from workers.envs.warmup import heldout_success

        self._since()
        result = heldout_success(version.checkpoint_path, self.heldout, seed=self.seed)
        model_version_update_metrics(
            tenant=self.tenant,
            version_id=version.pk,
            metrics={
                "heldout": {"success": result.success, "cases": result.cases, "reasons": result.reasons}
            },
        )
        elapsed = self._loop_seconds()
        self.curve.append(
            {"version": version.number, "seconds": round(elapsed, 1), "heldout": result.success}
        )
        self.out.write("")
        self._say(
            f"held-out success of {label} v{version.number}: {result.success:.0%} on {result.cases} cases "
            f"{dict(sorted(result.reasons.items()))}"
        )
        if label == "base":
            self.production = (version, result.success)
            self._row(version.number, "base", result.success)
        return result.success

    def _row(self, version_number: int, role: str, heldout: float, **extra) -> None:
        """A row of the final table (and of the summary): a version, what became of it, its held-out success."""
        self.rows.append(
            {
                "version": version_number,
                "role": role,
                "heldout": heldout,
                "seconds": round(self._loop_seconds(), 1),
                **extra,
            }
        )

    def _loop_seconds(self) -> float:
        return 0.0 if self.loop_started is None else time.monotonic() - self.loop_started

    def _release_start(self, version, success: float) -> None:
        """Offline gate, then a release: the candidate is loaded onto the slot not serving production and
        released over production (canary stage, guardrails); the beat's analysis ticks take it from there."""
        from apps.audit.services import Actor
        from apps.releases.services import release_create, release_start
        from apps.training.publication import model_version_publish

        production, _ = self.production
        # Against the best version production has had, not the current one: tolerances must not add up.
        best = max(row["heldout"] for row in self.rows if row["role"] in {"base", "promoted"})
        tolerance = _env_float("DEMO_TOLERANCE", 0.05)
        if success < best - tolerance:
            self._say(
                f"v{version.number} is worse offline than the best production has had ({success:.0%} < "
                f"{best:.0%} − {tolerance:.0%}): not released; the learner starts again from production "
                f"v{production.number}"
            )
            self._row(version.number, "rejected", success)
            self._restart_learner()
            return
        actor = Actor.system("demo")
        # The slot not serving production (at the start both serve the base: the second one is taken).
        serving = [
            backend for backend in self.backends.values() if backend.model_version == str(production.number)
        ]
        free = next((backend for backend in self.backends.values() if backend not in serving), serving[-1])
        (outcome,) = model_version_publish(
            tenant=self.tenant, actor=actor, version=version, backend_ids=[free.pk]
        )
        if not outcome.ok:
            self._say(f"loading v{version.number} onto {free.name} failed: {outcome.error}")
            return
        free.model_version = str(version.number)
        percent = _env_float("DEMO_CANARY_PERCENT", 50)
        release = release_create(
            tenant=self.tenant,
            actor=actor,
            candidate_id=version.pk,
            baseline_id=production.pk,
            stages=[percent],
            stage_min_seconds=_env_int("DEMO_CANARY_SECONDS", 10),
            failure_limit=1,
            inconclusive_limit=30,
            guardrails=[
                {
                    "metric": "reward_mean",
                    "direction": "higher_is_better",
                    "threshold": 0.25,
                    "min_samples": 10,
                },
                {
                    "metric": "error_rate",
                    "direction": "lower_is_better",
                    "threshold": 0.05,
                    "min_samples": 10,
                },
            ],
        )
        self.release = release_start(tenant=self.tenant, actor=actor, release_id=release.pk)
        self.release_offline = success
        self._say(
            f"release {release.pk}: v{version.number} ({success:.0%} offline) loaded on {free.name}, canary "
            f"at {percent:g}% of new sessions over production v{production.number} "
            f"({self.url}/releases/{release.pk}/)"
        )

    def _follow_release(self) -> None:
        """Approves a release awaiting approval (DEMO_APPROVE=manual: an operator does, in the console), and
        settles one that ended: promoted → production, rolled back → noted; a paused one is aborted."""
        from apps.audit.services import Actor
        from apps.releases.models import ReleaseStatus
        from apps.releases.selectors import release_get
        from apps.releases.services import release_abort, release_approve

        release = release_get(tenant=self.tenant, release_id=self.release.pk)
        if release.status == ReleaseStatus.AWAITING_APPROVAL:
            if os.environ.get("DEMO_APPROVE") == "manual":
                if self.release.status != release.status:
                    self.out.write("")
                    self._say(
                        f"release {release.pk} (v{release.candidate.number}) passed its canary and waits for "
                        f"an operator: approve it at {self.url}/releases/{release.pk}/"
                    )
            else:
                release = release_approve(
                    tenant=self.tenant, actor=Actor.system("demo auto-approval"), release_id=release.pk
                )
        elif release.status == ReleaseStatus.PAUSED:
            release = release_abort(
                tenant=self.tenant,
                actor=Actor.system("demo"),
                release_id=release.pk,
                reason="the canary stayed inconclusive; the demo moves on",
            )
        self.release = release
        if release.status == ReleaseStatus.PROMOTED:
            self.production = (release.candidate, self.release_offline)
            self._row(
                release.candidate.number,
                "promoted",
                self.release_offline,
                release=release.pk,
                approved_by=release.approved_by,
            )
            self.out.write("")
            self._say(
                f"release {release.pk}: v{release.candidate.number} promoted by {release.approved_by}; it now "
                f"serves every new session"
            )
        elif release.status in {ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}:
            self._row(
                release.candidate.number,
                release.status.replace("_", " "),
                self.release_offline,
                release=release.pk,
            )
            self.out.write("")
            self._say(
                f"release {release.pk}: v{release.candidate.number} {release.status.replace('_', ' ')} "
                f"({release.status_reason})"
            )
        if release.status in {ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}:
            self.release = None

    # ---- the end -----------------------------------------------------------------------------------------

    def _table(self, traffic, annotator) -> None:
        from django.db.models import Sum

        from apps.training.models import OnlineRun

        final = OnlineRun.objects.filter(pk__in=self.run_ids).aggregate(
            steps=Sum("steps"), stale=Sum("dropped_stale")
        )
        wall = time.monotonic() - self.started
        tokens = self._tokens()
        warmup = "reused" if self.base_reused else f"{self.warmup_seconds:.0f}s"
        self.out.write("\n" + "version  role         held-out success  at (s, loop)")
        for row in self.rows:
            self.out.write(
                f"v{row['version']:<7} {row['role']:<12} {row['heldout']:>15.0%}  {row['seconds']:>6.0f}"
            )
        served = [row for row in self.rows if row["role"] in {"base", "promoted"}]
        gain = (served[-1]["heldout"] - served[0]["heldout"]) if served else 0.0
        self.out.write(
            f"trajectories {traffic.stats.episodes}  tokens {tokens:,}  training steps {final['steps']}  "
            f"stale dropped {final['stale']}  online runs {len(self.run_ids)}  "
            f"held back {traffic.stats.held_back}  "
            f"loop {self._loop_seconds():.0f}s  warm-up {warmup}  wall time {wall:.0f}s  "
            f"gain {gain * 100:+.0f} points"
        )
        problems = annotator.stats
        self.out.write(
            f"annotator: {problems.labelled} labelled, {problems.skipped} skipped through the annotation API"
            + (f", {problems.errors} errors (last: {problems.last_problem})" if problems.errors else "")
        )
        if traffic.stats.rejected_rewards or traffic.stats.errors:
            self.out.write(
                f"rewards refused {traffic.stats.rejected_rewards}, episode errors {traffic.stats.errors}"
                f"{'  (last: ' + traffic.stats.last_problem + ')' if traffic.stats.last_problem else ''}"
            )
        summary = {
            "seed": self.seed,
            "model": self.model,
            "rows": self.rows,
            "curve": self.curve,
            "trajectories": traffic.stats.episodes,
            "tokens": tokens,
            "steps": final["steps"],
            "dropped_stale": final["stale"],
            "online_runs": len(self.run_ids),
            "held_back": traffic.stats.held_back,
            "wall_seconds": round(wall, 1),
            "loop_seconds": round(self._loop_seconds(), 1),
            "warmup_seconds": round(self.warmup_seconds, 1),
            "base_reused": self.base_reused,
            "annotator_labels": annotator.stats.labelled,
            "gain_points": round(gain * 100, 1),
        }
        path = os.environ.get("DEMO_SUMMARY") or str(Path(settings.VAR_DIR) / "demo-summary.json")
        Path(path).write_text(json.dumps(summary, indent=2))
        self.out.write(f"summary: {path}")

    def _alive(self) -> bool:
        return all(process.poll() is None for process in self.processes.values())

    def _shutdown(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        if self.processes:
            self.out.write("stopped every process of the demo")
