"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.rewards import views

urlpatterns = [
    path("evaluators/", views.evaluators, name="evaluators"),
    path("evaluators/<int:evaluator_id>/", views.evaluator_detail, name="evaluator"),
    path("reward-specs/", views.reward_specs, name="reward-specs"),
]
