"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.qualification import views

urlpatterns = [
    path("training-queue/", views.training_queue, name="training-queue"),
    path(
        "training-queue/trajectories/", views.training_queue_trajectories, name="training-queue-trajectories"
    ),
    path("trajectories/<uuid:trajectory_id>/review/", views.trajectory_review, name="trajectory-review"),
    path(
        "trajectories/<uuid:trajectory_id>/review/submit/",
        views.trajectory_review_submit,
        name="trajectory-review-submit",
    ),
    path(
        "trajectories/<uuid:trajectory_id>/review/override/",
        views.trajectory_override,
        name="trajectory-override",
    ),
    path(
        "trajectories/<uuid:trajectory_id>/review/run/",
        views.trajectory_run_gates,
        name="trajectory-run-gates",
    ),
]
