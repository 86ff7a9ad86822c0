from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "apps.training"
    label = "training"

    def ready(self) -> None:
        from apps.rewards.selectors import model_versions_register
        from apps.training.selectors import model_version_list, training_trajectory_ids_in_use
        from apps.trajectories.retention import retention_holder_register

        # A purge keeps the trajectories an unfinished training job still reads, past their retention.
        retention_holder_register(training_trajectory_ids_in_use)
        # An LLM judge is pinned to a version of this registry (apps.rewards.selectors.judge_target).
        model_versions_register(model_version_list)
