"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.releases import views

urlpatterns = [
    path("releases/", views.release_list, name="releases"),
    path("releases/new/", views.release_new, name="release-new"),
    path("releases/<int:release_id>/", views.release_detail, name="release"),
    path("releases/<int:release_id>/abort/", views.release_abort, name="release-abort"),
    path("releases/<int:release_id>/approve/", views.release_approve, name="release-approve"),
    path("releases/<int:release_id>/rollback/", views.release_rollback, name="release-rollback"),
    path("releases/<int:release_id>/start/", views.release_start, name="release-start"),
    path("releases/<int:release_id>/resume/", views.release_resume, name="release-resume"),
    path("releases/<int:release_id>/analyze/", views.release_analyze, name="release-analyze"),
    path("serving/", views.serving, name="serving"),
    path("serving/production/", views.serving_production, name="serving-production"),
]
