from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "apps.evolution"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.evolution.decisions import decision_follow_release_receiver
        from apps.releases.events import release_finished

        # A decision's state follows its release's (a promotion approved, rolled back or aborted elsewhere).
        release_finished.connect(decision_follow_release_receiver, dispatch_uid="evolution.follow_release")

        from apps.evolution.signals import evolution_traffic_forget
        from apps.trajectories.retention import purge_listener_register

        # Cluster examples and harness exemplars go with the trajectories they quote (retention).
        purge_listener_register(evolution_traffic_forget)
