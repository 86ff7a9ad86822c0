"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.evaluation import views

urlpatterns = [
    path("evaluation/", views.suite_list, name="eval-suites"),
    path("evaluation/suites/new/", views.suite_create, name="eval-suite-create"),
    path("evaluation/suites/<int:suite_id>/", views.suite_detail, name="eval-suite"),
    path("evaluation/suites/<int:suite_id>/cases/", views.case_create, name="eval-case-create"),
    path("evaluation/suites/<int:suite_id>/run/", views.run_start, name="eval-run-start"),
    path("evaluation/runs/<int:run_id>/", views.run_detail, name="eval-run"),
]
