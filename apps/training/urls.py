"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.training import views

urlpatterns = [
    path("training/jobs/", views.training_jobs, name="training-jobs"),
    path("training/jobs/new/", views.training_job_new, name="training-job-new"),
    path("training/jobs/<int:job_id>/", views.training_job_detail, name="training-job"),
    path("training/jobs/<int:job_id>/cancel/", views.training_job_cancel, name="training-job-cancel"),
    path("training/online/new/", views.online_run_new, name="online-run-new"),
    path("training/online/<int:run_id>/stop/", views.online_run_stop, name="online-run-stop"),
    path("models/", views.model_versions, name="model-versions"),
    path("models/register/", views.model_register, name="model-register"),
    path(
        "models/versions/<int:version_id>/publish/",
        views.model_version_publish,
        name="model-version-publish",
    ),
    path("models/<str:name>/lineage/", views.model_lineage, name="model-lineage"),
    path("models/<str:name>/chat-template/", views.model_chat_template, name="model-chat-template"),
    path("models/<str:name>/alias/", views.model_alias_move, name="model-alias-move"),
]
