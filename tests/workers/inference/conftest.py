"""Shared fixtures: the default model made once per session, a copy fine-tuned to call a tool, and real
servers (uvicorn in a background thread) over them. Nothing here imports Django."""

import json
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from workers.inference.engine import InferenceEngine
from workers.inference.modelgen import create_default_model
from workers.inference.server import create_app

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ADMIN_TOKEN = "test-admin-token"
MEMORIZED_MARGIN = 5.0  # logits


@dataclass(frozen=True)
class RunningServer:
    base_url: str
    engine: InferenceEngine

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/v1"


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory):
    return create_default_model(tmp_path_factory.mktemp("models") / "default", seed=0)


@pytest.fixture(scope="session")
def tool_model_dir(default_model_dir, tmp_path_factory):
    """The default model overfitted on one tool-calling transcript, so greedy decoding emits the call."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("models") / "tool-caller"
    shutil.copytree(default_model_dir, out)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    prompt = tokenizer.apply_chat_template(
        WEATHER_QUESTION, tools=[WEATHER_TOOL], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(WEATHER_CALL + "<|im_end|>", add_special_tokens=False)["input_ids"]
    input_ids = torch.tensor([prompt_ids + target_ids])
    labels = torch.tensor([[-100] * len(prompt_ids) + target_ids])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    target = torch.tensor(target_ids)
    positions = torch.arange(len(target_ids))
    for _ in range(400):
        output = model(input_ids=input_ids, labels=labels)
        logits = output.logits[0, len(prompt_ids) - 1 : -1].detach()
        # Teacher-forced margin of each target token over the best other token: greedy decoding emits the
        # call, and a margin this wide cannot be flipped by batching's float noise in another process.
        chosen = logits[positions, target]
        logits[positions, target] = float("-inf")
        if (chosen - logits.max(dim=-1).values).min() >= MEMORIZED_MARGIN:
            break
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
    else:
        raise AssertionError(
            f"the tool-call transcript was not memorized (margin {MEMORIZED_MARGIN}) in 400 steps"
        )
    model.eval()
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def mismatched_tokenizer_model_dir(default_model_dir, tmp_path_factory):
    """Same weights, a tokenizer with one extra token: must never be swapped in."""
    out = tmp_path_factory.mktemp("models") / "other-tokenizer"
    shutil.copytree(default_model_dir, out)
    tokenizer_file = out / "tokenizer.json"
    serialized = json.loads(tokenizer_file.read_text())
    serialized["model"]["vocab"]["zzextra"] = len(serialized["model"]["vocab"]) + len(
        serialized["added_tokens"]
    )
    tokenizer_file.write_text(json.dumps(serialized))
    return out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve(
    model_dir, *, admin_token=None, served_model_names=("default",), model_store=None, **engine_options
):
    """`model_store` default: the session's temporary root, which holds every model these tests make."""
    import uvicorn

    engine = InferenceEngine(model_dir, **engine_options)
    app = create_app(
        engine,
        served_model_names=list(served_model_names),
        admin_token=admin_token,
        model_store=model_store or [Path(model_dir).resolve().parents[1]],
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer(base_url=f"http://127.0.0.1:{port}", engine=engine)
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="session")
def server(default_model_dir):
    with serve(default_model_dir) as running:
        yield running


@pytest.fixture(scope="session")
def tool_server(tool_model_dir):
    with serve(tool_model_dir) as running:
        yield running


@pytest.fixture
def admin_server(default_model_dir):
    """A fresh server per test, since these tests swap weights and pause the engine."""
    with serve(default_model_dir, admin_token=ADMIN_TOKEN) as running:
        yield running


def reference_logprobs(model, prompt_ids, completion_ids) -> torch.Tensor:
    """log_softmax of a plain transformers forward pass over prompt + completion, at the completion tokens."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt_ids) + list(completion_ids)])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)[len(prompt_ids) - 1 : -1]
    return logprobs.gather(1, torch.tensor(list(completion_ids))[:, None])[:, 0]


def load_reference_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
