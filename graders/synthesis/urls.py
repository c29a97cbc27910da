"""The synthesis pages: runs, the funnel, human validation and the evaluator sweep."""

from django.urls import URLPattern, path

from graders.synthesis import validation_api, validation_views

VALIDATION = "p/<slug:slug>/syntheses/<int:synthesis_id>/validation/"

urlpatterns: list[URLPattern] = [
    path(VALIDATION, validation_views.validation_page, name="synthesis-validation"),
    path(
        VALIDATION + "sample/",
        validation_views.validation_sample,
        name="synthesis-validation-sample",
    ),
    # The synthesis's external id, as `synthesis_validation --synthesis ID` takes it.
    path(
        "api/projects/<slug:slug>/syntheses/<path:synthesis_id>/validation/",
        validation_api.validation_get,
        name="api-synthesis-validation",
    ),
]
