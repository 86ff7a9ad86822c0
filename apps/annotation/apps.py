from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "apps.annotation"
    label = "annotation"
