from django.urls import path

from apps.training import apis, online_apis

urlpatterns = [
    path("training-jobs/", apis.TrainingJobListApi.as_view(), name="training-job-list"),
    path("training-jobs/<int:job_id>/", apis.TrainingJobDetailApi.as_view(), name="training-job-detail"),
    path(
        "training-jobs/<int:job_id>/cancel/", apis.TrainingJobCancelApi.as_view(), name="training-job-cancel"
    ),
    path("model-versions/", apis.ModelVersionListApi.as_view(), name="model-version-list"),
    path(
        "model-versions/<int:version_id>/", apis.ModelVersionDetailApi.as_view(), name="model-version-detail"
    ),
    path(
        "model-versions/<int:version_id>/lineage/",
        apis.ModelVersionLineageApi.as_view(),
        name="model-version-lineage",
    ),
    path(
        "model-versions/<int:version_id>/publish/",
        apis.ModelVersionPublishApi.as_view(),
        name="model-version-publish",
    ),
    path(
        "model-versions/<int:version_id>/chat-template/",
        apis.ModelVersionChatTemplateApi.as_view(),
        name="model-version-chat-template",
    ),
    path("model-aliases/", apis.ModelAliasListApi.as_view(), name="model-alias-list"),
    path("online-runs/", online_apis.OnlineRunListApi.as_view(), name="online-run-list"),
    path("online-runs/<int:run_id>/", online_apis.OnlineRunDetailApi.as_view(), name="online-run-detail"),
    path("online-runs/<int:run_id>/stop/", online_apis.OnlineRunStopApi.as_view(), name="online-run-stop"),
]
