"""Idempotency keys are unique per (tenant, scope, key), the scope naming the source and the principal that
wrote the reward, so an agent key can no longer claim the key an evaluator or an annotator will use.
Existing rows get the scope of the path that wrote them: the calling key when `created_by` is one of the
tenant's key prefixes, the evaluator workers for evaluator keys, the annotator's user otherwise; anything
else (imports) keeps the empty scope, which no live path writes."""

from django.conf import settings
from django.db import migrations, models
from django.db.models import Value
from django.db.models.functions import Concat


def scope_existing_rewards(apps, schema_editor):
    Reward = apps.get_model("rewards", "Reward")
    ApiKey = apps.get_model("tenants", "ApiKey")
    User = apps.get_model(settings.AUTH_USER_MODEL)
    keyed = Reward.objects.exclude(idempotency_key=None).filter(idempotency_scope="")
    for tenant_id, prefix in ApiKey.objects.values_list("tenant_id", "prefix"):
        keyed.filter(tenant_id=tenant_id, created_by=prefix).update(
            idempotency_scope=Concat("source", Value(f"/key:{prefix}"))
        )
    keyed.filter(source="evaluator", idempotency_key__startswith="evaluator:").update(
        idempotency_scope="evaluator/worker"
    )
    names = set(keyed.filter(source="annotator").values_list("created_by", flat=True))
    for user_id, username in User.objects.filter(username__in=names).values_list("pk", "username"):
        keyed.filter(source="annotator", created_by=username).update(
            idempotency_scope=f"annotator/user:{user_id}"
        )


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("rewards", "0003_evaluator"),
        ("tenants", "0003_tenantpolicy_late_reward_hours"),
        ("trajectories", "0001_initial"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="reward",
            name="reward_unique_idempotency_key",
        ),
        migrations.AddField(
            model_name="reward",
            name="idempotency_scope",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.RunPython(scope_existing_rewards, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="reward",
            constraint=models.UniqueConstraint(
                fields=("tenant", "idempotency_scope", "idempotency_key"),
                name="reward_unique_scoped_idempotency_key",
            ),
        ),
    ]
