from django.urls import path

from apps.annotation.apis import (
    AnnotationExportApi,
    AnnotationLabelApi,
    AnnotationNextItemApi,
    AnnotationQueueDetailApi,
    AnnotationQueueFillApi,
    AnnotationQueueListApi,
    AnnotationResolveApi,
    AnnotationSkipApi,
)

urlpatterns = [
    path("annotation/queues/", AnnotationQueueListApi.as_view(), name="annotation-queue-list"),
    path(
        "annotation/queues/<int:queue_id>/",
        AnnotationQueueDetailApi.as_view(),
        name="annotation-queue-detail",
    ),
    path("annotation/queues/<int:queue_id>/fill/", AnnotationQueueFillApi.as_view(), name="annotation-fill"),
    path("annotation/queues/<int:queue_id>/next/", AnnotationNextItemApi.as_view(), name="annotation-next"),
    path(
        "annotation/queues/<int:queue_id>/labels/export/",
        AnnotationExportApi.as_view(),
        name="annotation-export",
    ),
    path("annotation/items/<int:item_id>/labels/", AnnotationLabelApi.as_view(), name="annotation-label"),
    path("annotation/items/<int:item_id>/skip/", AnnotationSkipApi.as_view(), name="annotation-skip"),
    path(
        "annotation/items/<int:item_id>/resolve/", AnnotationResolveApi.as_view(), name="annotation-resolve"
    ),
]
