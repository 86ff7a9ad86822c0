from django.urls import path

from apps.inference.apis import BackendCheckApi, BackendDetailApi, BackendListApi

urlpatterns = [
    path("backends/", BackendListApi.as_view(), name="backend-list"),
    path("backends/<int:backend_id>/", BackendDetailApi.as_view(), name="backend-detail"),
    path("backends/<int:backend_id>/check/", BackendCheckApi.as_view(), name="backend-check"),
]
