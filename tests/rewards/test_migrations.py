"""The idempotency-scope migration gives existing rewards the scope of the path that wrote them, so a retry
after the upgrade still finds its reward (an evaluator re-run stores no second result)."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE, AFTER = [("rewards", "0003_evaluator")], [("rewards", "0004_reward_idempotency_scope")]


@pytest.mark.django_db(transaction=True)
def test_existing_rewards_get_the_scope_of_their_writer(tenant, member):
    from apps.audit.services import Actor
    from apps.tenants.services import api_key_create
    from tests.trajectories.factories import TrajectoryFactory

    trajectory = TrajectoryFactory(tenant=tenant)
    key, _ = api_key_create(tenant=tenant, actor=Actor.system("test"), name="agent", scopes=["rewards:write"])
    person = member()
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("rewards", "Reward")
    rows = {
        "by-key": ("agent", key.prefix, "thumb-1"),
        "evaluator": ("evaluator", "exact@1", f"evaluator:1:{trajectory.pk}"),
        "annotator": ("annotator", person.username, f"annotation:1:{person.pk}"),
        "imported": ("user", "someone-else", "imported-1"),
    }
    for source, created_by, key_text in rows.values():
        old.objects.create(
            tenant_id=tenant.pk,
            trajectory_id=trajectory.pk,
            target="trajectory",
            value=1.0,
            source=source,
            created_by=created_by,
            idempotency_key=key_text,
        )
    old.objects.create(
        tenant_id=tenant.pk,
        trajectory_id=trajectory.pk,
        target="trajectory",
        value=1.0,
        source="agent",
        created_by=key.prefix,
        idempotency_key=None,
    )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    # The model as of AFTER: later migrations add columns the table does not have yet.
    Reward = executor.loader.project_state(AFTER).apps.get_model("rewards", "Reward")  # noqa: N806

    scopes = dict(
        Reward.objects.exclude(idempotency_key=None).values_list("idempotency_key", "idempotency_scope")
    )
    assert scopes == {
        "thumb-1": f"agent/key:{key.prefix}",
        f"evaluator:1:{trajectory.pk}": "evaluator/worker",
        f"annotation:1:{person.pk}": f"annotator/user:{person.pk}",
        "imported-1": "",
    }
    assert Reward.objects.get(idempotency_key=None).idempotency_scope == ""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # the schema the following tests expect
