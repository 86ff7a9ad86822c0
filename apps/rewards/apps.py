from django.apps import AppConfig


class RewardsConfig(AppConfig):
    name = "apps.rewards"
    label = "rewards"

    def ready(self) -> None:
        from apps.rewards.selectors import reward_record_part
        from apps.trajectories.selectors import record_part_register

        # An ATDP record carries its trajectory's rewards (apps.trajectories reads them through this part).
        record_part_register(reward_record_part)
