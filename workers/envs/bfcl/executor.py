"""The local executor of a multi-turn case: the model's calls run against BFCL's API classes (a file system,
a trading bot, travel booking, vehicle control, ...) from the case's initial state, and their results go
back to the model as tool messages. One executor is one run: its instances live across the run's turns and
are dropped by `close()`."""

from collections.abc import Sequence

from workers.envs.bfcl import checkers
from workers.envs.bfcl.calls import Malformed, ToolCall, call_string, checker_entry
from workers.envs.bfcl.cases import Case


class LocalExecutor:
    def __init__(self, case: Case):
        if not case.multi_turn:
            raise ValueError(f"{case.case_id} is a single-turn case: its calls are checked, not executed")
        self.case = case
        self._entry = checker_entry(case)
        self._name = checkers.run_name()

    def execute(self, calls: Sequence[ToolCall]) -> list[str]:
        """One result string per call, in order; a malformed call is answered with its reason and not run."""
        results = []
        for call in calls:
            string = call_string(self.case, call)
            if isinstance(string, Malformed):
                results.append(f"Error: {string.reason}")
                continue
            try:
                results.extend(checkers.execute_calls(calls=[string], entry=self._entry, name=self._name))
            except Exception as error:  # BFCL's executor catches the call's own errors; this is the rest
                results.append(f"Error during execution: {type(error).__name__}: {error}")
        return results

    def close(self) -> None:
        checkers.forget(self._name)

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
