"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.trajectories import views

urlpatterns = [
    path("trajectories/", views.trajectories, name="trajectories"),
    path("trajectories/<uuid:trajectory_id>/", views.trajectory_detail, name="trajectory-detail"),
    path("trajectories/<uuid:trajectory_id>/replay/", views.trajectory_replay, name="trajectory-replay"),
    path("trajectories/<uuid:trajectory_id>/end/", views.trajectory_end, name="trajectory-end"),
]
