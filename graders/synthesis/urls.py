"""The synthesis pages: runs, the funnel, human validation and the evaluator sweep."""

from django.urls import URLPattern, path

from graders.synthesis import (
    api,
    export_views,
    funnel_views,
    sweep_views,
    validation_api,
    validation_views,
    views,
)

RUN = "p/<slug:slug>/synthesis/<int:run_id>/"
VALIDATION = "p/<slug:slug>/syntheses/<int:synthesis_id>/validation/"
SWEEP = "p/<slug:slug>/syntheses/sweeps/<int:sweep_id>/"

urlpatterns: list[URLPattern] = [
    path("p/<slug:slug>/synthesis/", views.synthesis_runs_page, name="synthesis-runs"),
    path(RUN, views.synthesis_run_page, name="synthesis-run"),
    path(RUN + "cancel/", views.synthesis_run_cancel, name="synthesis-run-cancel"),
    path(RUN + "resume/", views.synthesis_run_resume, name="synthesis-run-resume"),
    path(RUN + "jobs.jsonl", views.harness_jobs_download, name="synthesis-harness-jobs"),
    path(RUN + "trajectories/", views.harness_trajectories_upload, name="synthesis-harness-import"),
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
    path("p/<slug:slug>/syntheses/sweeps/", sweep_views.sweeps_page, name="synthesis-sweeps"),
    path(SWEEP, sweep_views.sweep_page, name="synthesis-sweep"),
    path(SWEEP + "resume/", sweep_views.sweep_resume_view, name="synthesis-sweep-resume"),
    path(
        "api/projects/<slug:slug>/synthesis/funnel/",
        api.synthesis_funnel_get,
        name="api-synthesis-funnel",
    ),
    path(
        "p/<slug:slug>/synthesis/funnel/",
        funnel_views.synthesis_funnel_page,
        name="synthesis-funnel",
    ),
    path(
        "p/<slug:slug>/synthesis/kept-pairs.jsonl",
        export_views.kept_pairs_download,
        name="synthesis-kept-pairs",
    ),
    path(
        "p/<slug:slug>/synthesis/release/<str:part>.json",
        export_views.release_download,
        name="synthesis-release",
    ),
]
