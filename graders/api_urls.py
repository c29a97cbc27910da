"""The token API for training jobs, under /api/: rewards (graders/reward_api.py) and the
OpenAPI schema that describes it."""

from django.urls import path

from graders.reward_api import reward_urlpatterns, schema_view

urlpatterns = [
    *reward_urlpatterns,
    path("schema/", schema_view, name="api-schema"),
]
