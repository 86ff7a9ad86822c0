"""The training engine on the default model, float32 on CPU: SFT learns, GRPO raises a toy reward, a
resumed run equals the uninterrupted one, exports load in transformers."""

import json
from dataclasses import replace

import pytest
import torch

from tests.workers.engines.conftest import low_half_reward
from workers.engines import LoraSettings, TrainConfig, Trainer, latest_checkpoint, plan_batches
from workers.engines.rollout import sample_groups
from workers.engines.schedule import LRSchedule
from workers.rl.samples import TrainingSample

PROMPTS = [[1, 5, 9, 200], [1, 7, 300, 40], [3, 4, 5, 6]]


def fixed_set(count=6, length=14, prompt=4, seed=11) -> list[TrainingSample]:
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for index in range(count):
        ids = torch.randint(10, 3000, (length,), generator=generator).tolist()
        samples.append(
            TrainingSample(
                input_ids=tuple(ids),
                loss_mask=(0,) * prompt + (1,) * (length - prompt),
                logprobs=(0.0,) * length,
                versions=(-1,) * prompt + (0,) * (length - prompt),
                turns=(0,) * length,
                reward=float(index % 3),
                group_id=f"g{index // 3}",
                task_id=None,
                trajectory_id=f"t{index}",
                step_ids=("s",),
            )
        )
    return samples


def mean_nll(trainer, samples) -> float:
    logps = trainer.logprobs([s.input_ids for s in samples])
    total = sum(float(-(lp * torch.tensor(s.loss_mask)).sum()) for lp, s in zip(logps, samples, strict=True))
    return total / sum(s.generated_count for s in samples)


def test_sft_lowers_the_loss_on_a_fixed_set(model_dir):
    samples = fixed_set()
    trainer = Trainer(model_dir, TrainConfig(algorithm="sft", learning_rate=3e-3, micro_batch_tokens=32))
    before = mean_nll(trainer, samples)
    losses = [trainer.step(samples).loss for _ in range(8)]
    after = mean_nll(trainer, samples)
    assert before > 7.5  # about log(3072) for the untrained model
    assert after < before - 2.0
    assert losses[-1] < losses[0]


def test_grpo_raises_mean_reward_on_a_toy_task_within_ten_steps(model_dir):
    trainer = Trainer(model_dir, TrainConfig(algorithm="grpo", learning_rate=1e-2, seed=0))
    rewards = []
    for step in range(10):
        samples = sample_groups(
            trainer.model,
            PROMPTS,
            group_size=8,
            max_new_tokens=8,
            reward=low_half_reward,
            seed=step,
            policy_version=step,
        )
        metrics = trainer.step(samples, current_version=step)
        rewards.append(metrics.reward_mean)
        assert metrics.loss_tokens == 3 * 8 * 8
        assert metrics.samples == 24
        assert metrics.kl < 1e-6  # behaviour logprobs are the trainer's own before the update
    assert max(rewards[:2]) < 0.65
    assert sum(rewards[-2:]) / 2 > 0.8


def test_decoupled_ppo_reports_clipping_staleness_and_filtered_tokens(model_dir):
    samples = sample_groups(
        Trainer(model_dir, TrainConfig()).model,
        PROMPTS[:2],
        group_size=4,
        max_new_tokens=6,
        reward=low_half_reward,
        seed=0,
        policy_version=3,
    )
    config = TrainConfig(
        algorithm="decoupled_ppo",
        learning_rate=5e-3,
        minibatches=2,
        kpop_threshold=0.0005,
        behaviour_weight_cap=2.0,
    )
    trainer = Trainer(model_dir, config)
    first = trainer.step(samples, current_version=5)
    second = trainer.step(samples, current_version=5)
    assert first.staleness_histogram == ((2, 48),)
    assert 0.0 <= first.masked_token_fraction <= 1.0
    assert second.kl > 0  # the weights moved away from the behaviour policy
    assert second.clip_fraction > 0 or second.masked_token_fraction > 0
    loglinear = Trainer(model_dir, TrainConfig(algorithm="decoupled_ppo", proximal="loglinear"))
    assert loglinear.step(samples, current_version=5).loss_tokens == 48
    with pytest.raises(ValueError, match="current_version"):
        loglinear.step(samples)


def run(model_dir, config, samples, steps, trainer=None):
    trainer = trainer or Trainer(model_dir, config)
    for _ in range(steps):
        trainer.step(samples, current_version=1)
    return trainer


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4, alpha=8)], ids=["full", "lora"])
def test_resume_from_a_checkpoint_reproduces_the_uninterrupted_run(model_dir, tmp_path, lora):
    samples = fixed_set()
    config = TrainConfig(
        algorithm="decoupled_ppo",
        learning_rate=2e-3,
        schedule="cosine",
        warmup_steps=1,
        total_steps=8,
        minibatches=2,
        micro_batch_tokens=30,
        lora=lora,
        max_grad_norm=0.5,
    )
    straight = run(model_dir, config, samples, 4)

    first = run(model_dir, config, samples, 2)
    info = first.checkpoint(tmp_path / "run", data_position=12)
    del first
    assert latest_checkpoint(tmp_path / "run") == info
    resumed = Trainer.resume(model_dir, info.path)
    assert resumed.step_count == 2
    assert resumed.data_position == 12
    assert resumed.config == config
    run(model_dir, config, samples, 2, trainer=resumed)

    expected, got = straight.model.state_dict(), resumed.model.state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[key], got[key]) for key in expected)
    assert straight.schedule.current() == resumed.schedule.current()


def test_checkpoints_are_pruned_and_latest_moves(model_dir, tmp_path):
    trainer = Trainer(model_dir, TrainConfig(algorithm="sft", learning_rate=1e-3))
    assert latest_checkpoint(tmp_path) is None
    for _ in range(3):
        trainer.step(fixed_set(count=2))
        trainer.checkpoint(tmp_path, keep=2)
    assert sorted(path.name for path in tmp_path.glob("step-*")) == ["step-000002", "step-000003"]
    assert latest_checkpoint(tmp_path).step == 3


def test_export_is_a_hugging_face_directory_with_the_trained_weights(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    samples = fixed_set(count=3)
    trainer = Trainer(model_dir, TrainConfig(algorithm="sft", learning_rate=1e-2, lora=LoraSettings(rank=4)))
    trainer.step(samples)
    out = trainer.export(tmp_path / "export")
    assert (out / "tokenizer.json").exists()
    assert (out / "model.safetensors").exists()
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([samples[0].input_ids])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, trainer.model(input_ids=ids).logits, atol=1e-4)
    adapter = trainer.export_adapter(tmp_path / "adapter")
    assert (adapter / "adapter_config.json").exists()


def test_lr_schedules():
    constant = LRSchedule(kind="constant", base_lr=1.0, warmup_steps=2, total_steps=10)
    assert [constant.multiplier(u) for u in range(3)] == [0.5, 1.0, 1.0]
    linear = LRSchedule(kind="linear", base_lr=1.0, warmup_steps=0, total_steps=4, min_lr_ratio=0.2)
    assert [round(linear.multiplier(u), 6) for u in range(6)] == [1.0, 0.8, 0.6, 0.4, 0.2, 0.2]
    cosine = LRSchedule(kind="cosine", base_lr=1.0, warmup_steps=0, total_steps=2)
    assert [round(cosine.multiplier(u), 6) for u in range(3)] == [1.0, 0.5, 0.0]


def test_batch_plan_keeps_groups_whole_and_is_deterministic():
    keys = ["a", "a", "b", "b", "c", "c", None]
    plan = plan_batches(keys, batch_size=4, total_steps=5, seed=3)
    assert plan == plan_batches(keys, batch_size=4, total_steps=5, seed=3)
    assert len(plan) == 5
    for batch in plan:
        for key in {"a", "b", "c"}:
            members = {i for i, k in enumerate(keys) if k == key}
            assert members <= set(batch) or not members & set(batch)


def test_config_round_trips_and_rejects_nonsense():
    config = TrainConfig(algorithm="sft", lora=LoraSettings(rank=2), betas=(0.9, 0.95))
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="algorithm"):
        TrainConfig(algorithm="dpo")
    with pytest.raises(ValueError, match="unknown"):
        TrainConfig.from_dict({"learning_rat": 1})
    # whole groups settle by the sessions' group_id; alike groups are without a signal only against their mean
    assert TrainConfig(whole_groups=True, skip_uniform_groups=True).skip_uniform_groups
    with pytest.raises(ValueError, match="whole_groups needs group_by group_id"):
        TrainConfig(whole_groups=True, group_by="task_id")
    with pytest.raises(ValueError, match="skip_uniform_groups needs"):
        TrainConfig(skip_uniform_groups=True)
    with pytest.raises(ValueError, match="skip_uniform_groups needs"):
        TrainConfig(whole_groups=True, skip_uniform_groups=True, mean_level="batch")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bf16_autocast_on_cuda(model_dir):
    trainer = Trainer(model_dir, TrainConfig(algorithm="sft", learning_rate=1e-3), device="cuda")
    assert trainer.autocast_dtype == torch.bfloat16
    metrics = trainer.step(fixed_set(count=2))
    assert metrics.loss > 0
    assert next(trainer.model.parameters()).dtype == torch.float32


def grouped_set(seed=3) -> tuple[list[list[int]], list[list[int]]]:
    """Two GRPO-like groups (3 and 2 sequences sharing a prompt of 7 and 4 tokens; each remainder is a
    generated turn, a tool result and a second turn), a sequence of its own, one with nothing generated."""
    generator = torch.Generator().manual_seed(seed)

    def tokens(count):
        return torch.randint(10, 3000, (count,), generator=generator).tolist()

    sequences, masks = [], []
    for prompt, members, rest in ((tokens(7), 3, 9), (tokens(4), 2, 6)):
        for member in range(members):
            tail = tokens(rest + member)
            sequences.append(prompt + tail)
            masks.append([0] * len(prompt) + [1] * 3 + [0] * 2 + [1] * (len(tail) - 5))
    sequences += [tokens(6), tokens(5)]
    masks += [[0, 0, 1, 1, 1, 1], [0] * 5]
    return sequences, masks


def test_every_layout_gives_the_packed_reference_logprobs_and_gradients(model_dir):
    from transformers import AutoModelForCausalLM

    from workers.engines.forward import micro_batch_logprobs
    from workers.rl.packing import pack_sequences, packed_token_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    samples = fixed_set(count=3, length=14) + fixed_set(count=2, length=9, prompt=2, seed=5)
    for ids, masks in (([s.input_ids for s in samples], [s.loss_mask for s in samples]), grouped_set()):
        mask = torch.tensor([m for loss_mask in masks for m in loss_mask], dtype=torch.bool)
        reference = packed_token_logprobs(model, pack_sequences(ids), attention="mask")
        reference[mask].sum().backward()
        reference_grads = [p.grad.clone() for p in model.parameters()]
        for layout in ("packed", "padded", "prefix"):
            model.zero_grad(set_to_none=True)
            got = micro_batch_logprobs(model, ids, masks, layout=layout, attention="mask")
            assert torch.allclose(got[mask], reference[mask].detach(), atol=1e-5), layout
            assert not got[~mask].any()  # no head computed off the loss mask
            got[mask].sum().backward()
            for expected, parameter in zip(reference_grads, model.parameters(), strict=True):
                assert torch.allclose(parameter.grad, expected, atol=1e-4, rtol=1e-4), layout
        model.zero_grad(set_to_none=True)


def test_the_prefix_layout_with_single_token_prefixes(model_dir):
    """Sequences whose first generated token is their second (a one-token prefix, so no context to share)
    beside a shared group, and a micro-batch of such sequences alone (run padded): the packed reference's
    logprobs and gradients either way."""
    from transformers import AutoModelForCausalLM

    from workers.engines.forward import micro_batch_logprobs
    from workers.rl.packing import pack_sequences, packed_token_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sequences, masks = grouped_set(seed=9)
    sequences, masks = sequences[:3], masks[:3]  # the group of three sharing a 7-token prompt
    sequences += [[5, 60, 61, 62], [5, 70, 71], [8, 80, 81, 82, 83]]
    masks += [[0, 1, 1, 1], [0, 1, 1], [0, 1, 0, 1, 1]]
    for ids, loss_masks in ((sequences, masks), (sequences[3:], masks[3:])):
        mask = torch.tensor([m for loss_mask in loss_masks for m in loss_mask], dtype=torch.bool)
        model.zero_grad(set_to_none=True)
        reference = packed_token_logprobs(model, pack_sequences(ids), attention="mask")
        reference[mask].sum().backward()
        reference_grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        got = micro_batch_logprobs(model, ids, loss_masks, layout="prefix", attention="mask")
        assert torch.allclose(got[mask], reference[mask].detach(), atol=1e-5)
        assert not got[~mask].any()
        got[mask].sum().backward()
        for expected, parameter in zip(reference_grads, model.parameters(), strict=True):
            assert torch.allclose(parameter.grad, expected, atol=1e-4, rtol=1e-4)


def test_micro_batch_plans():
    from workers.engines.forward import plan_micro_batches, resolve_layout, shared_prefix_length

    assert plan_micro_batches([[1] * 14, [1] * 9, [1] * 14, [1] * 9], [[0, 1]] * 4, 28, "padded") == [
        [0, 2],
        [1, 3],
    ]
    sequences, masks = grouped_set()
    assert [shared_prefix_length(s, m) for s, m in zip(sequences, masks, strict=True)] == [
        7,
        7,
        7,
        4,
        4,
        2,
        5,
    ]
    # one budget for all: the groups stay whole and in order
    assert plan_micro_batches(sequences, masks, 4096, "prefix") == [[2, 1, 0, 4, 3, 5, 6]]
    # a tight one: prefixes × longest prefix + sequences × longest remainder within 40 tokens:
    # 1 × 7 + 3 × 11 = 40; then 2 × 4 + 3 × 7 = 29, and the last would make 3 × 5 + 4 × 7 = 43
    assert plan_micro_batches(sequences, masks, 40, "prefix") == [[2, 1, 0], [4, 3, 5], [6]]

    class Model:
        config = type("Config", (), {"_attn_implementation": "sdpa"})()
        is_activation_checkpointing = False

    assert resolve_layout(Model(), "auto") == "prefix"
    Model.is_activation_checkpointing = True  # a recomputed layer would append to the shared cache again
    assert resolve_layout(Model(), "auto") == "padded"
    with pytest.raises(ValueError, match="gradient checkpointing"):
        resolve_layout(Model(), "prefix")
    # weights on a GPU: padded (measured faster there than prefix, bench/gpu/README.md); on the CPU: prefix
    Model.is_activation_checkpointing = False
    weights = type("Weights", (), {"device": torch.device("cpu")})()
    Model.parameters = lambda self: iter([weights])
    assert resolve_layout(Model(), "auto") == "prefix"
    weights.device = type("Device", (), {"type": "cuda"})()  # no CUDA here: a stand-in device
    assert resolve_layout(Model(), "auto") == "padded"


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4, alpha=8)], ids=["full", "lora"])
def test_the_prefix_layout_trains_like_the_padded_one(model_dir, lora):
    samples = sample_groups(
        Trainer(model_dir, TrainConfig()).model,
        PROMPTS,
        group_size=4,
        max_new_tokens=6,
        reward=low_half_reward,
        seed=0,
    )
    steps = {}
    for layout in ("padded", "prefix"):
        trainer = Trainer(
            model_dir, TrainConfig(algorithm="grpo", learning_rate=1e-3, layout=layout, lora=lora)
        )
        assert trainer.layout == layout
        steps[layout] = [trainer.step(samples) for _ in range(2)]
    for padded, prefix in zip(steps["padded"], steps["prefix"], strict=True):
        assert prefix.loss == pytest.approx(padded.loss, abs=1e-6)
        assert prefix.grad_norm == pytest.approx(padded.grad_norm, rel=1e-4)
        assert prefix.loss_tokens == padded.loss_tokens == 3 * 4 * 6
    assert steps["prefix"][1].kl > 0  # the second step saw moved weights, the same way on both
    assert steps["prefix"][1].kl == pytest.approx(steps["padded"][1].kl, rel=1e-3)


def test_zero_advantage_samples_are_not_forwarded_and_the_update_is_the_same(model_dir):
    """A GRPO group whose rewards are all equal has advantage zero: its samples add nothing to the gradient,
    so the trainer skips their forward and backward, and the weights move exactly as without the skip."""
    samples = fixed_set()  # g0: rewards 0, 1, 2 (the 1 is g0's mean: advantage 0); g1 made all equal below
    samples = [replace(sample, reward=1.0) if sample.group_id == "g1" else sample for sample in samples]
    runs = {}
    for skip in (True, False):
        config = TrainConfig(algorithm="decoupled_ppo", learning_rate=1e-3, skip_zero_advantage=skip)
        trainer = Trainer(model_dir, config)
        runs[skip] = (trainer, [trainer.step(samples, current_version=1) for _ in range(2)])
    (skipping, skipped_steps), (full, full_steps) = runs[True], runs[False]
    for fast, slow in zip(skipped_steps, full_steps, strict=True):
        assert (fast.skipped_samples, slow.skipped_samples) == (4, 0)
        assert fast.tokens == slow.tokens // 3  # g1's three samples and g0's middle one were not forwarded
        assert fast.loss_tokens == slow.loss_tokens == 6 * 10  # the denominator counts them still
        assert fast.loss == pytest.approx(slow.loss, abs=1e-7)
        assert fast.grad_norm == pytest.approx(slow.grad_norm, rel=1e-5)
    for mine, theirs in zip(skipping.model.parameters(), full.model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)

    # every sample idle: no forward at all, and Adam's update from its moments is still the one it was
    idle = [replace(sample, reward=1.0) for sample in samples]
    moved = {skip: runs[skip][0].step(idle, current_version=1) for skip in (True, False)}
    assert (moved[True].skipped_samples, moved[False].skipped_samples) == (6, 0)
    assert moved[True].tokens == 0
    assert moved[True].grad_norm == moved[False].grad_norm == 0.0
    for mine, theirs in zip(skipping.model.parameters(), full.model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
