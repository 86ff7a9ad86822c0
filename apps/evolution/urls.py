"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.evolution import views

urlpatterns = [
    path("evolution/", views.evolution_home, name="evolution"),
    path("evolution/policies/new/", views.policy_new, name="evolution-policy-new"),
    path("evolution/policies/<int:policy_id>/", views.policy_detail, name="evolution-policy"),
    path("evolution/policies/<int:policy_id>/edit/", views.policy_edit, name="evolution-policy-edit"),
    path("evolution/policies/<int:policy_id>/delete/", views.policy_delete, name="evolution-policy-delete"),
    path(
        "evolution/decisions/<int:decision_id>/approve/",
        views.decision_approve_view,
        name="evolution-decision-approve",
    ),
    path(
        "evolution/decisions/<int:decision_id>/reject/",
        views.decision_reject_view,
        name="evolution-decision-reject",
    ),
]
