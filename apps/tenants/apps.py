from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"

    def ready(self):
        from apps.tenants import (
            schema,  # noqa: F401  (registers the OpenAPI auth extension)
            sign_ins,  # noqa: F401  (audits sign-ins through Django's auth signals)
        )
