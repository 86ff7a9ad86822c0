import uuid

from django.db import migrations, models

# apps.trajectories.models.TRAJECTORY_NAMESPACE, as it was when this migration was written.
GATEWAY_NAMESPACE = uuid.UUID("5b0c1a52-7f0e-4c8e-9a43-3c1c2f6ad2b1")


def mark_imported(apps, schema_editor):
    """Trajectories imported before imports got fresh ids kept the record's id as their primary key: the
    gateway and `trajectory_open` only ever store the id derived from (tenant, session), so any other id
    came from an import. They keep their id (rewards, reviews and datasets name it) and their source id is
    recorded, so importing the same record again is refused like any duplicate."""
    Trajectory = apps.get_model("trajectories", "Trajectory")
    imported = [
        trajectory_id
        for trajectory_id, tenant_id, session_id in Trajectory.objects.values_list(
            "id", "tenant_id", "session_id"
        ).iterator(chunk_size=2000)
        if trajectory_id != uuid.uuid5(GATEWAY_NAMESPACE, f"{tenant_id}:{session_id}")
    ]
    for start in range(0, len(imported), 1000):
        Trajectory.objects.filter(pk__in=imported[start : start + 1000]).update(
            source_trajectory_id=models.F("id")
        )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0003_tenantpolicy_late_reward_hours"),
        ("trajectories", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="trajectory",
            name="source_trajectory_id",
            field=models.UUIDField(
                blank=True,
                help_text="The id an imported record carried; imports get a fresh `id`.",
                null=True,
            ),
        ),
        migrations.RunPython(mark_imported, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="trajectory",
            constraint=models.UniqueConstraint(
                fields=("tenant", "source_trajectory_id"), name="trajectory_unique_source"
            ),
        ),
    ]
