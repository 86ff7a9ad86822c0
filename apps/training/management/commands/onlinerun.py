"""manage.py onlinerun: starts or stops a tenant's online run (apps/training/online.py), as the API's
`/api/v1/online-runs/` and the console's Training page do.

    manage.py onlinerun acme start --model support-bot --samples-per-step 16 --staleness-bound 2
    manage.py onlinerun acme stop
"""

from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError


class Command(BaseCommand):
    help = "Starts an online run from a model's production version (start), or stops the running one (stop)."

    def add_arguments(self, parser):
        parser.add_argument("tenant_slug")
        parser.add_argument("action", choices=["start", "stop"])
        parser.add_argument("--model", help="start: learn from this model's production version")
        parser.add_argument("--learning-rate", type=float, default=1e-5)
        parser.add_argument("--samples-per-step", type=int, default=16)
        parser.add_argument("--publish-every", type=int, default=1)
        parser.add_argument("--staleness-bound", type=int, default=1)
        parser.add_argument(
            "--rollout-bound",
            type=int,
            default=None,
            help="ρ: sessions let out ahead of the learner (default: η)",
        )
        parser.add_argument("--max-steps", type=int, default=None)
        parser.add_argument(
            "--registered-only",
            action="store_true",
            help="register each version without serving it (releases decide what serves)",
        )

    def handle(self, *args, tenant_slug, action, **options):
        from apps.tenants.selectors import tenant_get_by_slug

        actor = Actor.system("manage.py onlinerun")
        try:
            tenant = tenant_get_by_slug(slug=tenant_slug)
            if action == "start":
                self._start(tenant, actor, **options)
            else:
                self._stop(tenant, actor)
        except DomainError as error:
            raise CommandError(error.message) from None

    def _start(self, tenant, actor, *, model, learning_rate, samples_per_step, publish_every, **options):
        from apps.training.online import online_run_start
        from apps.training.selectors import alias_resolve

        if not model:
            raise CommandError("start needs --model")
        base = alias_resolve(tenant=tenant, name=model, alias="production")
        if base is None:
            raise CommandError(f"{model} has no production version in {tenant.slug}")
        run = online_run_start(
            tenant=tenant,
            actor=actor,
            base_version=base,
            hyperparameters={"learning_rate": learning_rate},
            samples_per_step=samples_per_step,
            publish_every=publish_every,
            staleness_bound=options["staleness_bound"],
            rollout_bound=options["rollout_bound"],
            max_steps=options["max_steps"],
            publish_to_backends=not options["registered_only"],
        )
        self.stdout.write(f"online run {run.pk} learns from {base.label} (a train worker runs it)")

    def _stop(self, tenant, actor):
        from apps.training.online import online_run_active, online_run_stop

        running = online_run_active(tenant=tenant)
        if running is None:
            raise CommandError(f"{tenant.slug} has no running online run")
        online_run_stop(tenant=tenant, actor=actor, run_id=running.pk)
        self.stdout.write(f"online run {running.pk}: stop requested (it stops after its current step)")
