"""A base version over the default model (registered through its service) and qualified trajectories whose
tokens the default model sampled (rewarded through the agent's path). Rows without a real checkpoint:
tests/training/factories.py."""

from apps.audit.services import Actor
from apps.rewards.services import reward_append_for_agent
from apps.training.models import VersionStatus
from apps.training.services import model_version_register
from tests.qualification.factories import QualificationFactory
from tests.rewards.factories import make_spec
from tests.trajectories.factories import StepFactory, TrajectoryFactory
from workers.atdp.tokens import pack_floats, pack_ids, pack_versions
from workers.inference.modelgen import VOCAB_SIZE, tokenizer_fingerprint

SYSTEM = Actor.system("test")
MODEL = "policy-small"


def base_version(tenant, model_dir, *, name=MODEL):
    return model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=name,
        checkpoint_path=str(model_dir),
        tokenizer_hash=tokenizer_fingerprint(model_dir),
        status=VersionStatus.PRODUCTION,
    )


def qualified_trajectories(
    tenant, *, groups=3, group_size=4, prompt=6, completion=8, version=0, seed=0, task="task", reward=None
):
    """groups × group_size one-call trajectories (random ids the default tokenizer knows) of tasks `<task>-<n>`
    in groups `<task>-<n>#0`, rewarded by the fraction of low-half completion tokens (or `reward`), each with
    a qualified verdict."""
    import random

    from apps.rewards.models import RewardSpec

    if not RewardSpec.objects.filter(tenant=tenant, name="quality").exists():
        make_spec(tenant)
    rng = random.Random(seed)
    made = []
    for group in range(groups):
        prompt_ids = [rng.randrange(10, VOCAB_SIZE) for _ in range(prompt)]
        for _member in range(group_size):
            completion_ids = [rng.randrange(10, VOCAB_SIZE) for _ in range(completion)]
            trajectory = TrajectoryFactory(
                tenant=tenant,
                task_id=f"{task}-{group}",
                group_id=f"{task}-{group}#0",
                steps=0,
                step_count=1,
                prompt_tokens=prompt,
                completion_tokens=completion,
            )
            StepFactory(
                trajectory=trajectory,
                index=0,
                observation={"messages": [{"role": "user", "content": "q"}]},
                action={"text": "a", "tool_calls": []},
                result={"finish_reason": "length"},
                prompt_tokens=prompt,
                completion_tokens=completion,
                prompt_ids=pack_ids(prompt_ids),
                completion_ids=pack_ids(completion_ids),
                completion_logprobs=pack_floats([-8.0] * completion),
                completion_versions=pack_versions([version] * completion),
                tokenizer="default",
            )
            value = sum(1 for token in completion_ids if token < VOCAB_SIZE // 2) / completion
            value = value if reward is None else reward
            reward_append_for_agent(
                tenant_id=tenant.pk,
                session_id=trajectory.session_id,
                step_id=None,
                value=value,
                kind=None,
                source="user",
                label="",
                idempotency_key=None,
                timing="delayed",
                created_by="test",
            )
            QualificationFactory(trajectory=trajectory, qualified=True, training_reward=value)
            made.append(trajectory)
    return made


def inbox_model(tenant, directory: str = "tiny"):
    """A minimal model directory (what registration reads: config, safetensors weights, a fast tokenizer, a chat
    template; nothing a server could load) in the tenant's model inbox; returns its name there."""
    import json

    from django.conf import settings
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    path = settings.AREAL_MODEL_INBOX_DIR / tenant.slug / directory
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "model.safetensors").write_bytes(b"{}")
    Tokenizer(WordLevel({"hi": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return directory
