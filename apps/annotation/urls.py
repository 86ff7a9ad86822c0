"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.annotation import views

urlpatterns = [
    path("annotation/", views.queue_list, name="annotation-queues"),
    path("annotation/new/", views.queue_create, name="annotation-queue-create"),
    path("annotation/<int:queue_id>/", views.queue_detail, name="annotation-queue"),
    path("annotation/<int:queue_id>/work/", views.workspace, name="annotation-workspace"),
    path("annotation/<int:queue_id>/previous/", views.previous, name="annotation-previous"),
    path("annotation/items/<int:item_id>/label/", views.label_submit, name="annotation-label"),
    path("annotation/items/<int:item_id>/skip/", views.item_skip, name="annotation-skip"),
    path("annotation/items/<int:item_id>/resolve/", views.item_resolve, name="annotation-resolve"),
]
