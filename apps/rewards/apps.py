from django.apps import AppConfig


class RewardsConfig(AppConfig):
    name = "apps.rewards"
    label = "rewards"
