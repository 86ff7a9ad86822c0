from django.apps import AppConfig


class QualificationConfig(AppConfig):
    name = "apps.qualification"
    label = "qualification"

    def ready(self):
        from django.db.models.signals import post_save

        from apps.qualification.triggers import trajectory_saved
        from apps.trajectories.models import Trajectory

        post_save.connect(trajectory_saved, sender=Trajectory, dispatch_uid="qualification.trajectory_saved")
