"""BFCL, the Berkeley Function Calling Leaderboard (PyPI `bfcl-eval`), as an environment (no Django): its
cases and ground truth, a fixed train / held-out split, requests with OpenAI tools, scoring by BFCL's own
checkers, a local executor of its simulated APIs, and an unmodified openai-SDK agent. README.md says how."""

from workers.envs.bfcl.agent import (
    BfclAgent,
    CaseResult,
    CaseRun,
    Posted,
    Step,
    reward_bodies,
    run_case,
    score_run,
)
from workers.envs.bfcl.calls import Malformed, ToolCall, ast_output, call_string
from workers.envs.bfcl.cases import (
    CATEGORIES,
    HELD_OUT_ONE_IN,
    MULTI_TURN_CATEGORIES,
    SINGLE_TURN_CATEGORIES,
    SPLIT_SEED,
    Case,
    load_cases,
    split_of,
)
from workers.envs.bfcl.executor import LocalExecutor
from workers.envs.bfcl.scoring import Score, score, score_multi_turn, score_single_turn
from workers.envs.bfcl.tools import json_schema, openai_tool, openai_tools, tool_name, turn_messages

__all__ = [
    "CATEGORIES",
    "HELD_OUT_ONE_IN",
    "MULTI_TURN_CATEGORIES",
    "SINGLE_TURN_CATEGORIES",
    "SPLIT_SEED",
    "BfclAgent",
    "Case",
    "CaseResult",
    "CaseRun",
    "LocalExecutor",
    "Malformed",
    "Posted",
    "Score",
    "Step",
    "ToolCall",
    "ast_output",
    "call_string",
    "json_schema",
    "load_cases",
    "openai_tool",
    "openai_tools",
    "reward_bodies",
    "run_case",
    "score",
    "score_multi_turn",
    "score_run",
    "score_single_turn",
    "split_of",
    "tool_name",
    "turn_messages",
]
