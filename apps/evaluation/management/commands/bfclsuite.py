from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError
from apps.evaluation.bfcl import DEFAULT_MAX_TOKENS, DEFAULT_NAME, bfcl_categories, bfcl_suite_create
from apps.evaluation.selectors import eval_case_counts
from apps.tenants.selectors import tenant_get_by_slug


class Command(BaseCommand):
    help = (
        "Creates a tenant's eval suite of BFCL's held-out split (apps/evaluation/bfcl.py): the cases come from "
        "the installed bfcl-eval package and are scored by its official checker; run it against a version like "
        "any suite (POST /api/v1/eval/runs/ or the console)."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant_slug")
        parser.add_argument("--name", default=DEFAULT_NAME, help=f"the suite's name (default {DEFAULT_NAME})")
        parser.add_argument(
            "--categories",
            nargs="+",
            default=None,
            help=f"BFCL categories (default all non-live ones: {' '.join(bfcl_categories())})",
        )
        parser.add_argument(
            "--per-category", type=int, default=None, help="the first N held-out cases of each category"
        )
        parser.add_argument("--cases", nargs="+", default=None, help="only these held-out case ids")
        parser.add_argument("--agent", default="", help="the agent name the suite's calls carry")
        parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
        parser.add_argument("--max-steps-per-turn", type=int, default=5)

    def handle(self, *args, tenant_slug, name, categories, per_category, agent, max_tokens, **options):
        try:
            tenant = tenant_get_by_slug(slug=tenant_slug)
            suite = bfcl_suite_create(
                tenant=tenant,
                actor=Actor.system("manage.py bfclsuite"),
                name=name,
                categories=categories,
                per_category=per_category,
                case_ids=options["cases"],
                agent_name=agent,
                max_tokens=max_tokens,
                max_steps_per_turn=options["max_steps_per_turn"],
            )
        except DomainError as error:
            fields = "; ".join(
                f"{field}: {' '.join(problems)}" for field, problems in (error.fields or {}).items()
            )
            raise CommandError(f"{error.message}{' (' + fields + ')' if fields else ''}") from None
        counts = eval_case_counts(tenant=tenant, suite_id=suite.pk)
        listed = ", ".join(f"{category} {count}" for category, count in counts.items())
        self.stdout.write(
            f"suite {suite.name} (id {suite.pk}) of {tenant.slug}: {sum(counts.values())} cases ({listed})"
        )
