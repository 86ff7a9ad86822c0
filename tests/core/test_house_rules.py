"""The house style (STYLE.md) held by the tree itself: what a reviewer would otherwise have to remember."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _functions(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


SERVICE_AND_SELECTOR_MODULES = sorted(
    [*ROOT.glob("apps/*/services.py"), *ROOT.glob("apps/*/selectors.py")], key=str
)


@pytest.mark.parametrize("path", SERVICE_AND_SELECTOR_MODULES, ids=_relative)
def test_services_and_selectors_type_their_tenant_argument(path):
    """mypy checks these modules; a `tenant` argument without `Tenant` would escape it."""
    untyped = [
        f"{function.name} (line {function.lineno})"
        for function in _functions(path)
        for argument in [*function.args.args, *function.args.kwonlyargs]
        if argument.arg == "tenant"
        and (argument.annotation is None or "Tenant" not in ast.unparse(argument.annotation))
    ]
    assert not untyped, f"tenant arguments without a Tenant annotation in {_relative(path)}: {untyped}"


@pytest.mark.parametrize("path", sorted(ROOT.glob("apps/*/views.py"), key=str), ids=_relative)
def test_console_views_read_through_selectors(path):
    """Views never touch `Model.objects`: reads go through the app's selectors, writes through services."""
    managers = [
        f"line {node.lineno}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "objects"
    ]
    assert not managers, f"{_relative(path)} uses a model manager directly: {managers}"


TASK_BODY_MAX_LINES = 20


@pytest.mark.parametrize("path", sorted(ROOT.glob("apps/*/tasks.py"), key=str), ids=_relative)
def test_tasks_are_thin_entrypoints(path):
    """A task wraps a service or runner: a long body is a run loop that belongs in the app's runners."""
    long_tasks = [
        f"{function.name} ({function.end_lineno - function.lineno + 1} lines)"
        for function in _functions(path)
        if function.end_lineno - function.lineno + 1 > TASK_BODY_MAX_LINES
    ]
    assert not long_tasks, f"tasks over {TASK_BODY_MAX_LINES} lines in {_relative(path)}: {long_tasks}"


def test_workers_import_no_django():
    """workers/ is Django-free compute, testable on the CPU in milliseconds and free of import cycles."""
    offenders = []
    for path in sorted(ROOT.glob("workers/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{_relative(path)}: {name}"
                for name in names
                if name.split(".")[0]
                in {"django", "rest_framework", "channels", "celery", "apps", "areal_web"}
            ]
    assert not offenders, offenders
