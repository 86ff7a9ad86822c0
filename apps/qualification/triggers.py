"""The one signal this app listens to: a trajectory that ends (or is imported ended). The receiver only
enqueues work on commit (gates, evaluators); the trajectories app stays unaware of qualification."""

from apps.trajectories.choices import TrajectoryStatus


def trajectory_saved(sender, instance, created, update_fields=None, **kwargs):
    ended = instance.status != TrajectoryStatus.OPEN
    if not ended or not (created or (update_fields and "status" in update_fields)):
        return
    from apps.qualification.services import qualification_enqueue
    from apps.rewards.services import evaluators_enqueue

    evaluators_enqueue(trajectory_id=instance.pk, tenant_id=instance.tenant_id)
    qualification_enqueue(trajectory_id=instance.pk)
