"""`python -m demo` (`make demo`): the self-evolving agent loop end to end, run by the demo package (see its
README). Settings come from the environment (demo/config.py); the options below only move its ports."""

import argparse
import os
import sys


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "areal_web.settings.local")  # as manage.py does
    import django

    django.setup()
    from django.core.management.base import CommandError, OutputWrapper
    from django.core.management.color import color_style

    from areal_web.env import ConfigurationError, env_int, env_str

    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description=(
            "Runs the self-evolving demo: warm-up, live traffic, rewards, qualification, online decoupled PPO, "
            "held-out evaluation and promotion, then a table. A second run RESETS var/demo (DEMO_KEEP=1 keeps "
            "it and adds a run). DEMO_EXIT=1 exits after the table; DEMO_APPROVE=manual asks an operator. "
            "Every DEMO_* setting: demo/config.py."
        ),
    )
    try:
        parser.add_argument("--host", default=env_str("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=env_int("PORT", 8000))
        parser.add_argument("--inference-port", type=int, default=env_int("AREAL_INFERENCE_PORT", 8100))
    except ConfigurationError as error:
        parser.error(str(error))
    options = parser.parse_args(argv)
    style = color_style()
    out, err = OutputWrapper(sys.stdout), OutputWrapper(sys.stderr)
    err.style_func = style.ERROR  # as a management command's stderr
    try:
        run(argv, options, out=out, err=err, style=style)
    except CommandError as error:  # a refusal or a failure with its one-line reason, as a command's
        err.write(f"CommandError: {error}")
        return error.returncode
    return 0


def run(argv: list[str], options: argparse.Namespace, *, out, err, style) -> None:
    from pathlib import Path

    from django.conf import settings
    from django.core.management.base import CommandError

    from areal_web.env import ConfigurationError
    from demo.config import DemoConfig
    from demo.run import Demo
    from demo.stack import refuse_busy_ports, reset_and_reexec

    refuse_busy_ports(options.host, port=options.port, inference_port=options.inference_port)
    try:
        demo_config = DemoConfig.from_environment()
    except (ValueError, ConfigurationError) as error:  # a DEMO_* value that is not a number, an unknown name
        raise CommandError(str(error)) from error
    if Path(settings.VAR_DIR).resolve() != demo_config.var_dir:
        reset_and_reexec(demo_config, argv, out=out)  # settings are read at import: run again there
        return
    Demo(
        out=out,
        err=err,
        style=style,
        host=options.host,
        port=options.port,
        inference_port=options.inference_port,
        demo_config=demo_config,
    ).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
