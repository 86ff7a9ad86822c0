"""`manage.py demo` (`make demo`): the self-evolving agent loop end to end, run by apps.demo (see its README)."""

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.demo.run import Demo
from apps.demo.settings import DemoSettings
from apps.demo.stack import refuse_busy_ports, reset_and_reexec


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
        refuse_busy_ports(host, port=port, inference_port=inference_port)
        try:
            demo_settings = DemoSettings.from_environment()
        except ValueError as error:  # a DEMO_* value that is not a number, a model or scenario not known
            raise CommandError(str(error)) from error
        if Path(settings.VAR_DIR).resolve() != demo_settings.var_dir:
            reset_and_reexec(demo_settings, out=self.stdout)  # settings are read at import: run again there
            return
        Demo(self, host=host, port=port, inference_port=inference_port, demo_settings=demo_settings).run()
