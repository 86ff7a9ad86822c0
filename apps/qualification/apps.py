from django.apps import AppConfig


class QualificationConfig(AppConfig):
    name = "apps.qualification"
    label = "qualification"

    def ready(self):
        from django.db.models.signals import post_save

        from apps.qualification.triggers import trajectory_saved

        # The sender by its label: Django resolves it once the app registry is ready (no import of
        # trajectories' models).
        post_save.connect(
            trajectory_saved, sender="trajectories.Trajectory", dispatch_uid="qualification.trajectory_saved"
        )

        from apps.qualification.selectors import qualification_record_part, review_record_part
        from apps.trajectories.selectors import record_part_register

        # An ATDP record carries its trajectory's reviews and the gates' verdict.
        record_part_register(review_record_part)
        record_part_register(qualification_record_part)
