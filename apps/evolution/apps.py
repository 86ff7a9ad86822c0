from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "apps.evolution"
    default_auto_field = "django.db.models.BigAutoField"
