"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.audit import views

urlpatterns = [
    path("audit/", views.audit, name="audit"),
]
