"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.training.views import jobs, versions

urlpatterns = [
    path("training/jobs/", jobs.training_jobs, name="training-jobs"),
    path("training/jobs/new/", jobs.training_job_new, name="training-job-new"),
    path("training/jobs/<int:job_id>/", jobs.training_job_detail, name="training-job"),
    path("training/jobs/<int:job_id>/cancel/", jobs.training_job_cancel, name="training-job-cancel"),
    path("training/online/new/", jobs.online_run_new, name="online-run-new"),
    path("training/online/<int:run_id>/stop/", jobs.online_run_stop, name="online-run-stop"),
    path("models/", versions.model_versions, name="model-versions"),
    path("models/register/", versions.model_register, name="model-register"),
    path(
        "models/versions/<int:version_id>/publish/",
        versions.model_version_publish,
        name="model-version-publish",
    ),
    path("models/<str:name>/lineage/", versions.model_lineage, name="model-lineage"),
    path("models/<str:name>/chat-template/", versions.model_chat_template, name="model-chat-template"),
    path("models/<str:name>/alias/", versions.model_alias_move, name="model-alias-move"),
]
