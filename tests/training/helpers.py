"""A base version over the default model and qualified trajectories whose tokens the default model sampled."""

import uuid

from django.utils import timezone

from apps.audit.services import Actor
from apps.qualification.models import Qualification, QualificationStatus
from apps.rewards.services import reward_append_for_agent
from apps.training.models import VersionStatus
from apps.training.services import model_version_register
from apps.trajectories.models import Step, Trajectory, trajectory_id_for
from tests.rewards.factories import make_spec
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


def qualified_trajectories(tenant, *, groups=3, group_size=4, prompt=6, completion=8, version=0, seed=0):
    """groups × group_size one-call trajectories (random ids the default tokenizer knows), rewarded by the
    fraction of low-half completion tokens, each with a qualified verdict."""
    import random

    make_spec(tenant)
    rng = random.Random(seed)
    made = []
    for group in range(groups):
        prompt_ids = [rng.randrange(10, VOCAB_SIZE) for _ in range(prompt)]
        for _member in range(group_size):
            completion_ids = [rng.randrange(10, VOCAB_SIZE) for _ in range(completion)]
            session = f"s-{uuid.uuid4().hex[:10]}"
            trajectory = Trajectory.objects.create(
                id=trajectory_id_for(tenant_id=tenant.pk, session_id=session),
                tenant=tenant,
                session_id=session,
                agent_name="helper",
                task_id=f"task-{group}",
                group_id=f"task-{group}#0",
                status="complete",
                purpose="production",
                consent="full",
                started_at=timezone.now(),
                ended_at=timezone.now(),
                step_count=1,
                prompt_tokens=prompt,
                completion_tokens=completion,
            )
            Step.objects.create(
                tenant=tenant,
                trajectory=trajectory,
                index=0,
                kind="llm_call",
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
                created_at=timezone.now(),
            )
            value = sum(1 for token in completion_ids if token < VOCAB_SIZE // 2) / completion
            reward_append_for_agent(
                tenant_id=tenant.pk,
                session_id=session,
                step_id=None,
                value=value,
                kind=None,
                source="user",
                label="",
                idempotency_key=None,
                timing="delayed",
                created_by="test",
            )
            Qualification.objects.create(
                tenant=tenant,
                trajectory=trajectory,
                status=QualificationStatus.QUALIFIED,
                gate_status=QualificationStatus.QUALIFIED,
                content_hash=uuid.uuid4().hex,
                training_reward=value,
            )
            made.append(trajectory)
    return made


def queued_job(tenant, *, base=None, **fields):
    """A queued job row over a one-trajectory snapshot (no worker involved)."""
    from apps.training.models import ModelVersion, TrainingJob

    base = (
        base
        or ModelVersion.objects.filter(tenant=tenant).first()
        or ModelVersion.objects.create(
            tenant=tenant,
            name=MODEL,
            number=0,
            checkpoint_path="/models/base",
            tokenizer_hash="tok",
            status=VersionStatus.PRODUCTION,
        )
    )  # no audit event: the role matrix compares audit counts
    defaults = {
        "algorithm": "grpo",
        "config": {"algorithm": "grpo"},
        "total_steps": 5,
        "dataset_snapshot": {"trajectory_ids": [str(uuid.uuid4())], "content_hash": "h", "filters": {}},
    }
    return TrainingJob.objects.create(tenant=tenant, base_version=base, **{**defaults, **fields})
