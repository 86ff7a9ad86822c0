"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.inference import views

urlpatterns = [
    path("backends/", views.backends, name="backends"),
    path("backends/<int:backend_id>/check/", views.backend_check, name="backend-check"),
    path("backends/<int:backend_id>/drain/", views.backend_drain, name="backend-drain"),
    path("backends/<int:backend_id>/provider/", views.backend_provider, name="backend-provider"),
]
