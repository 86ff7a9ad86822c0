from django.urls import path

from apps.qualification.apis import (
    QualificationDetailApi,
    QualificationLimitsApi,
    QualificationListApi,
    QualificationOverrideApi,
    QualificationRunApi,
    ReviewListApi,
    TrainingQueueApi,
)

urlpatterns = [
    path("reviews/", ReviewListApi.as_view(), name="review-list"),
    path("qualification/", QualificationListApi.as_view(), name="qualification-list"),
    path("qualification/limits/", QualificationLimitsApi.as_view(), name="qualification-limits"),
    path(
        "qualification/<uuid:trajectory_id>/", QualificationDetailApi.as_view(), name="qualification-detail"
    ),
    path("qualification/<uuid:trajectory_id>/run/", QualificationRunApi.as_view(), name="qualification-run"),
    path(
        "qualification/<uuid:trajectory_id>/override/",
        QualificationOverrideApi.as_view(),
        name="qualification-override",
    ),
    path("training-queue/", TrainingQueueApi.as_view(), name="training-queue"),
]
