"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.training import views

urlpatterns = [
    path("training/jobs/", views.training_jobs, name="training-jobs"),
    path("training/jobs/new/", views.training_job_new, name="training-job-new"),
    path("training/jobs/<int:job_id>/", views.training_job_detail, name="training-job"),
    path("training/jobs/<int:job_id>/cancel/", views.training_job_cancel, name="training-job-cancel"),
    path("models/", views.model_versions, name="model-versions"),
    path("models/<str:name>/lineage/", views.model_lineage, name="model-lineage"),
    path("models/<str:name>/chat-template/", views.model_chat_template, name="model-chat-template"),
]
