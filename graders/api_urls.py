"""The token API for training jobs, under /api/: rewards (graders/reward_api.py) and the
OpenAPI schema that describes it, bundles, and the bulk capture of rollouts
(graders/capture_api.py)."""

from django.urls import path

from graders.bundle_views import bundle_alias_api, bundle_api
from graders.capture_api import capture_log
from graders.reward_api import reward_urlpatterns, schema_view

urlpatterns = [
    *reward_urlpatterns,
    path("p/<slug:slug>/graders/<int:grader_id>/bundle", bundle_api, name="api-bundle"),
    path(
        "p/<slug:slug>/graders/alias/<str:name>/bundle",
        bundle_alias_api,
        name="api-bundle-alias",
    ),
    path("p/<slug:slug>/capture", capture_log, name="api-capture"),
    path("schema/", schema_view, name="api-schema"),
]
