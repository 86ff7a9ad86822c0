from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"

    def ready(self) -> None:
        from apps.gateway.services import stored_responses_forget
        from apps.trajectories.retention import purge_listener_register

        # Stored Responses API answers go with the trajectories whose steps they are (retention).
        purge_listener_register(stored_responses_forget)
