"""Asynchronous (η = 2) vs synchronous (η = 0) online RL on the weather desk, in one process, no Django.

    .venv/bin/python -m bench.training.eta --base DIR --samples 96 --batch 16 [--rounds 2]

Real components: a rollout thread starts the environment's two-turn episodes (workers.envs.weather) a group
at a time while the budget allows, each episode an agent in its own thread, on an in-process
InferenceEngine that batches their turns; every generated token's id, behaviour logprob and policy
version is kept;
episodes become ATDP-shaped records, turned into samples by workers.rl.samples.build_samples under the
staleness bound (as the product's online run does); the main thread trains one decoupled-PPO step per
`--batch` episodes, exports the weights and swaps them into the engine (InferenceEngine.load_checkpoint,
what the embedded server's /admin/load calls) as the next version. At a swap, episodes in flight go on
over the KV caches the old weights wrote (`recompute_kv=False`, PipelineRL's in-flight update; their
behaviour logprobs stay exact); `--recompute-kv` recomputes them first (AReaL's interruptible generation),
which costs a prefill of every running context per version. Only the asynchronous arm has episodes in
flight at a swap.

Back-pressure is AReaL's (apps.training.online.online_capacity): with v versions published, at most
(η + v + 1)·B episodes may have been started, dropped ones not counted. η = 0 is strictly synchronous:
generate B, train, publish, generate B... Both arms start from the same base, seed and tasks and train the
same number of episodes; the wall clock runs from the first rollout to the last publication. The held-out
success of each arm's final version is measured afterwards (workers.envs.warmup.heldout_success).

Threads: each arm runs as it would be deployed on the machine's two cores. The synchronous arm runs one
phase at a time, so each phase gets every core (`--threads`, 2). The asynchronous arm runs rollout and
training at once, as AReaL gives them their own devices: the engine's decode thread gets
`--async-rollout-threads` (1) torch threads and the trainer `--async-train-threads` (1), a core each. OpenMP
keeps a thread count per thread: the engine's thread takes its count from its first operation, so it is
started, and runs one token, before the trainer's count is set. Measured splits are in the README (1/1 and
2/2 came out the same; 1/2 oversubscribes the cores and loses the overlap).
"""

import argparse
import json
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workers.envs import warmup, weather  # noqa: E402

ARM_ETAS = {"sync": 0, "async": 2}


def play_episode(engine, tokenizer, task, *, number: int, max_tokens: int, seed: int) -> dict:
    """One episode, turn by turn, as an agent runs it (its own thread; the engine batches whatever is in
    flight): an ATDP-shaped record whose llm_call steps keep the engine's token ids, behaviour logprobs and
    per-token policy versions. Reward: 1.0 when weather.check passes (the simulated user's thumbs, without
    noise), else 0.0."""
    from workers.inference.chat import parse_assistant_text
    from workers.inference.sampling import SamplingParams

    episode = {"task": task, "number": number, "messages": task.opening(), "steps": []}
    for turn in range(2):
        prompt = warmup._render(tokenizer, episode["messages"], generation_prompt=True)
        params = SamplingParams(
            max_tokens=max_tokens, temperature=1.0, seed=seed * 100_003 + number * 7 + turn
        )
        choice = engine.submit(prompt, params, incremental=False).result().choices[0]
        episode["steps"].append(
            {
                "step_id": f"episode-{number}-turn-{turn}",
                "kind": "llm_call",
                "pii": {"redacted": False},
                "tokens": {
                    "tokenizer": "bench",
                    "prompt_ids": list(prompt),
                    "completion_ids": list(choice.token_ids),
                    "completion_logprobs": list(choice.logprobs),
                    "completion_versions": list(choice.policy_versions),
                    "loss_mask": None,
                },
            }
        )
        reply = parse_assistant_text(choice.text)
        calls = [call.to_openai() for call in reply.tool_calls]
        episode["messages"].append(
            {"role": "assistant", "content": reply.content or "", **({"tool_calls": calls} if calls else {})}
        )
        for call in calls:
            episode["messages"].append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": weather.tool_result(
                        task, call["function"]["name"], call["function"]["arguments"]
                    ),
                }
            )
        if not calls:
            break
    return _record(episode)


def _record(episode: dict) -> dict:
    task = episode["task"]
    success = weather.check(task, episode["messages"]).success
    return {
        "trajectory_id": f"episode-{episode['number']}",
        "group_id": task.task_id,
        "task_id": task.task_id,
        "rewards": [{"target": "trajectory", "value": 1.0 if success else 0.0}],
        "steps": episode["steps"],
    }


class Pipeline:
    """The producer's side: a group of episodes is started whenever the staleness budget allows, each
    episode in its own thread (agents run independently; the engine batches their turns), and a group is
    handed to the trainer once all its episodes have ended."""

    def __init__(self, engine, *, eta: int, samples: int, batch: int, group: int, max_tokens: int, seed: int):
        self.engine, self.eta, self.samples, self.batch, self.group = engine, eta, samples, batch, group
        self.max_tokens, self.seed = max_tokens, seed
        self.tasks = weather.make_tasks(split="train", count=samples, seed=seed)  # enough for no drop at all
        self.ready: queue.Queue = (
            queue.Queue()
        )  # lists of records (one group each), or an episode's exception
        self.changed = threading.Condition()
        self.published = 0  # versions the engine serves beyond the base
        self.counted = 0  # episodes started and not dropped as stale
        self.started = 0
        self.in_flight = 0
        self.busy_since = 0.0
        self.rollout_seconds = 0.0  # time with at least one episode in flight
        self.finished = False
        self.thread = threading.Thread(target=self._run, name="rollout", daemon=True)

    def capacity(self) -> int:
        return min((self.eta + self.published + 1) * self.batch, self.samples) - self.counted

    def publish(self, version: int) -> None:
        with self.changed:
            self.published = version
            self.changed.notify_all()

    def dropped(self, count: int) -> None:
        with self.changed:
            self.counted -= count
            self.changed.notify_all()

    def finish(self) -> None:
        with self.changed:
            self.finished = True
            self.changed.notify_all()

    def _run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.finished or self.capacity() >= self.group)
                if self.finished:
                    return
                self.counted += self.group
                first = self.started
                self.started += self.group
                if not self.in_flight:
                    self.busy_since = time.perf_counter()
                self.in_flight += self.group
            task = self.tasks[(first // self.group) % len(self.tasks)]
            records: list = [None] * self.group
            for member in range(self.group):
                threading.Thread(
                    target=self._episode,
                    args=(task, first, member, records),
                    daemon=True,
                    name=f"episode-{first + member}",
                ).start()

    def _episode(self, task, first: int, member: int, records: list) -> None:
        try:
            record = play_episode(
                self.engine,
                self.engine.tokenizer,
                task,
                number=first + member,
                max_tokens=self.max_tokens,
                seed=self.seed,
            )
        except Exception as error:  # handed to the trainer's thread, which raises it
            record = error
        with self.changed:
            records[member] = record
            self.in_flight -= 1
            if not self.in_flight:
                self.rollout_seconds += time.perf_counter() - self.busy_since
            if all(item is not None for item in records):
                failures = [item for item in records if isinstance(item, Exception)]
                self.ready.put(failures[0] if failures else records)


def run_arm(
    base,
    work_dir: Path,
    *,
    eta: int,
    samples: int,
    batch: int,
    group: int,
    max_tokens: int,
    learning_rate: float,
    seed: int,
    rollout_threads: int = 2,
    train_threads: int = 2,
    recompute_kv: bool = False,
    layout: str = "auto",
) -> dict:
    """One online run from `base`: `samples` episodes trained in steps of `batch`, a version per step; the
    engine's decode thread uses `rollout_threads` torch threads, the trainer `train_threads`."""
    import torch

    from workers.inference.engine import InferenceEngine
    from workers.inference.sampling import SamplingParams

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(rollout_threads)
    engine = InferenceEngine(base, max_batch_size=64).start()
    try:
        engine.submit(
            [0, 1], SamplingParams(max_tokens=1, temperature=1.0, seed=0)
        ).result()  # fixes its count
        torch.set_num_threads(train_threads)
        result = _run_arm(
            base,
            work_dir,
            engine,
            eta=eta,
            samples=samples,
            batch=batch,
            group=group,
            max_tokens=max_tokens,
            learning_rate=learning_rate,
            seed=seed,
            recompute_kv=recompute_kv,
            layout=layout,
        )
        return {**result, "threads": {"rollout": rollout_threads, "train": train_threads}}
    finally:
        engine.stop()  # a rollout still waiting on the engine (after an error) is failed and ends
        torch.set_num_threads(previous_threads)


def _run_arm(
    base,
    work_dir: Path,
    engine,
    *,
    eta: int,
    samples: int,
    batch: int,
    group: int,
    max_tokens: int,
    learning_rate: float,
    seed: int,
    recompute_kv: bool,
    layout: str,
) -> dict:
    from workers.engines import TrainConfig, Trainer
    from workers.rl.samples import build_samples

    steps = samples // batch
    config = TrainConfig(
        algorithm="decoupled_ppo",
        learning_rate=learning_rate,
        std_level="batch",
        behaviour_weight_cap=5.0,
        micro_batch_tokens=8192,
        total_steps=steps,
        seed=seed,
        layout=layout,
    )
    trainer = Trainer(base, config)
    pipeline = Pipeline(
        engine, eta=eta, samples=samples, batch=batch, group=group, max_tokens=max_tokens, seed=seed
    )
    waiting: list[dict] = []
    lags: dict[int, int] = {}
    trained = sequences = loss_tokens = stale = 0
    train_seconds = publish_seconds = slowest_publish = 0.0
    rewards = []
    started = time.perf_counter()
    pipeline.thread.start()
    try:
        for version in range(steps):
            taken: list = []
            while len(taken) < batch:
                if not waiting:
                    item = pipeline.ready.get()
                    if isinstance(item, Exception):
                        raise item
                    waiting.extend(item)
                record = waiting.pop(0)
                sample_set = build_samples([record], current_version=version, eta=eta)
                if sample_set.counts.stale_samples:
                    stale += 1
                    pipeline.dropped(1)
                    continue
                taken.append((record, sample_set.samples))
            batch_samples = [sample for _, samples_of in taken for sample in samples_of]
            began = time.perf_counter()
            metrics = trainer.step(batch_samples, current_version=version)
            trained_at = time.perf_counter()
            train_seconds += trained_at - began
            for lag, count in metrics.staleness_histogram:
                lags[lag] = lags.get(lag, 0) + count
            trained += len(taken)
            sequences += len(batch_samples)
            loss_tokens += metrics.loss_tokens
            rewards.append(metrics.reward_mean)
            out = trainer.export(work_dir / f"version-{version + 1}")
            engine.load_checkpoint(out, version=version + 1, recompute_kv=recompute_kv)
            publish_seconds += time.perf_counter() - trained_at
            slowest_publish = max(slowest_publish, time.perf_counter() - trained_at)
            pipeline.publish(version + 1)
        wall = time.perf_counter() - started
        stats = engine.stats()
    finally:
        pipeline.finish()
        engine.stop()  # a rollout still waiting on the engine (after an error) is failed and ends
        pipeline.thread.join(timeout=10)
    return {
        "eta": eta,
        "wall_seconds": wall,
        "trained_samples": trained,
        "training_sequences": sequences,
        "dropped_stale": stale,
        "episodes_started": pipeline.started,
        "loss_tokens": loss_tokens,
        "tokens_per_second": loss_tokens / wall,
        "steps": steps,
        "rollout_seconds": pipeline.rollout_seconds,
        "train_seconds": train_seconds,
        "publish_seconds": publish_seconds,
        "slowest_publish_seconds": slowest_publish,
        "reward_means": rewards,
        "staleness_histogram": {str(lag): count for lag, count in sorted(lags.items())},
        "engine": {
            name: getattr(stats, name)
            for name in ("prefill_tokens", "prefix_hit_tokens", "decode_steps", "max_decode_batch_size")
        },
        "final_dir": str(work_dir / f"version-{steps}"),
    }


def run_benchmark(
    base,
    *,
    samples: int,
    batch: int,
    group: int = 4,
    max_tokens: int = 40,
    rounds: int = 1,
    heldout: int = 64,
    learning_rate: float = 1e-4,
    seed: int = 0,
    work_dir=None,
    threads: int = 2,
    async_rollout_threads: int = 1,
    async_train_threads: int = 1,
    recompute_kv: bool = False,
    layout: str = "auto",
) -> dict:
    """Both arms from `base`, `rounds` times (the order alternates); the last round's final versions are
    measured on `heldout` held-out tasks. Returns the JSON-able result."""
    if samples % batch or batch % group:
        raise ValueError("--samples must be a multiple of --batch, and --batch of --group")
    with tempfile.TemporaryDirectory(prefix="eta-bench-", dir=work_dir) as scratch:
        # One untimed step first: the first run in a process pays for loading libraries and warming caches.
        run_arm(
            base,
            Path(scratch) / "warm-up",
            eta=0,
            samples=batch,
            batch=batch,
            group=group,
            max_tokens=max_tokens,
            learning_rate=learning_rate,
            seed=seed,
            rollout_threads=threads,
            train_threads=threads,
            recompute_kv=recompute_kv,
            layout=layout,
        )
        arm_threads = {"sync": (threads, threads), "async": (async_rollout_threads, async_train_threads)}
        runs = []
        for round_index in range(rounds):
            order = ["sync", "async"] if round_index % 2 == 0 else ["async", "sync"]
            arms = {}
            for arm in order:
                arms[arm] = run_arm(
                    base,
                    Path(scratch) / f"round-{round_index}-{arm}",
                    eta=ARM_ETAS[arm],
                    samples=samples,
                    batch=batch,
                    group=group,
                    max_tokens=max_tokens,
                    learning_rate=learning_rate,
                    seed=seed,
                    rollout_threads=arm_threads[arm][0],
                    train_threads=arm_threads[arm][1],
                    recompute_kv=recompute_kv,
                    layout=layout,
                )
                print(
                    f"round {round_index + 1}/{rounds} {arm}: {arms[arm]['wall_seconds']:.1f} s", flush=True
                )
            runs.append(
                {
                    "order": order,
                    "arms": arms,
                    "ratio_sync_over_async": arms["sync"]["wall_seconds"] / arms["async"]["wall_seconds"],
                }
            )
        tasks = weather.make_tasks(split="heldout", count=heldout, seed=seed)
        final = {
            arm: warmup.heldout_success(runs[-1]["arms"][arm]["final_dir"], tasks, seed=seed).success
            for arm in ARM_ETAS
        }
        base_success = warmup.heldout_success(base, tasks, seed=seed).success
    for run in runs:
        for arm in run["arms"].values():
            del arm["final_dir"]
    ratios = [run["ratio_sync_over_async"] for run in runs]
    return {
        "settings": {
            "samples": samples,
            "batch": batch,
            "group": group,
            "max_tokens": max_tokens,
            "rounds": rounds,
            "heldout": heldout,
            "learning_rate": learning_rate,
            "seed": seed,
            "recompute_kv": recompute_kv,
            "layout": layout,
            "etas": ARM_ETAS,
            "threads": {
                arm: {"rollout": rollout, "train": train} for arm, (rollout, train) in arm_threads.items()
            },
        },
        "runs": runs,
        "heldout_success": {"base": base_success, **final},
        "ratio_sync_over_async": {"per_round": ratios, "median": statistics.median(ratios)},
    }


def table(result: dict) -> str:
    lines = [
        f"{'round':>5} {'arm':<6} {'η':>2} {'thr':>5} {'wall s':>8} {'trained':>8} {'dropped':>8} {'tokens/s':>9} "
        f"{'rollout s':>10} {'train s':>8} {'publish s':>10} {'cached %':>9}"
    ]
    for number, run in enumerate(result["runs"], 1):
        for name in ARM_ETAS:
            arm = run["arms"][name]
            lines.append(
                f"{number:>5} {name:<6} {arm['eta']:>2} {arm['threads']['rollout']:>2}/{arm['threads']['train']:<2} {arm['wall_seconds']:>8.1f} "
                f"{arm['trained_samples']:>8} {arm['dropped_stale']:>8} {arm['tokens_per_second']:>9.1f} "
                f"{arm['rollout_seconds']:>10.1f} {arm['train_seconds']:>8.1f} {arm['publish_seconds']:>10.1f} "
                f"{_cached_share(arm['engine']):>9.0%}"
            )
        lines.append(f"{number:>5} sync/async wall clock: {run['ratio_sync_over_async']:.2f}×")
    success = result["heldout_success"]
    lines.append(f"median sync/async: {result['ratio_sync_over_async']['median']:.2f}× (goal ≥ 1.3×)")
    slowest = {
        name: max(run["arms"][name]["slowest_publish_seconds"] for run in result["runs"]) for name in ARM_ETAS
    }
    lines.append(
        f"slowest publication (export + swap into the serving engine): sync {slowest['sync']:.3f} s, "
        f"async {slowest['async']:.3f} s; no generation failed (a failure ends the run)"
    )
    lines.append(
        f"held-out success ({result['settings']['heldout']} tasks): base {success['base']:.3f}, "
        f"sync {success['sync']:.3f}, async {success['async']:.3f} (last round's final versions)"
    )
    return "\n".join(lines)


def _cached_share(engine: dict) -> float:
    """Share of prompt tokens whose keys and values came from the engine's prefix cache."""
    return engine["prefix_hit_tokens"] / max(engine["prefix_hit_tokens"] + engine["prefill_tokens"], 1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", help="base checkpoint directory; default: build one (modelgen + train_base)"
    )
    parser.add_argument("--base-steps", type=int, default=20, help="train_base steps when building the base")
    parser.add_argument(
        "--base-skill-steps", type=int, default=20, help="train_base skill_steps when building it"
    )
    parser.add_argument("--samples", type=int, default=96, help="episodes each arm trains on")
    parser.add_argument("--batch", type=int, default=16, help="episodes per training step (and version)")
    parser.add_argument("--group", type=int, default=4, help="episodes per task (one GRPO group)")
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1, help="alternate the arms this many times")
    parser.add_argument("--heldout", type=int, default=64, help="held-out tasks for the final score")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads of the synchronous arm's phases"
    )
    parser.add_argument(
        "--async-rollout-threads",
        type=int,
        default=1,
        help="torch threads of the asynchronous arm's decode thread",
    )
    parser.add_argument("--async-train-threads", type=int, default=1, help="torch threads of its trainer")
    parser.add_argument(
        "--recompute-kv",
        action="store_true",
        help="recompute in-flight sequences' KV caches at each weight swap (default: keep them)",
    )
    parser.add_argument("--layout", default="auto", help="the trainer's TrainConfig.layout")
    parser.add_argument("--out", default=str(ROOT / "test-artifacts" / "bench-training-eta.json"))
    arguments = parser.parse_args(argv)
    import torch

    torch.set_num_threads(arguments.threads)
    with tempfile.TemporaryDirectory(prefix="eta-base-") as scratch:
        base = arguments.base
        if base is None:
            from workers.inference.modelgen import create_default_model

            print(
                f"building a base: {arguments.base_skill_steps} skill + {arguments.base_steps} SFT steps",
                flush=True,
            )
            base = warmup.train_base(
                create_default_model(Path(scratch) / "initial", seed=arguments.seed),
                Path(scratch) / "base",
                steps=arguments.base_steps,
                skill_steps=arguments.base_skill_steps,
                seed=arguments.seed,
            )
        result = run_benchmark(
            base,
            samples=arguments.samples,
            batch=arguments.batch,
            group=arguments.group,
            max_tokens=arguments.max_tokens,
            rounds=arguments.rounds,
            heldout=arguments.heldout,
            learning_rate=arguments.learning_rate,
            seed=arguments.seed,
            threads=arguments.threads,
            async_rollout_threads=arguments.async_rollout_threads,
            async_train_threads=arguments.async_train_threads,
            recompute_kv=arguments.recompute_kv,
            layout=arguments.layout,
        )
    result["settings"]["base"] = arguments.base or "built"
    print(table(result))
    out = Path(arguments.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
