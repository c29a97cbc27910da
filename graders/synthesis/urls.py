"""The synthesis pages: runs, the funnel, human validation and the evaluator sweep."""

from django.urls import URLPattern, path

from graders.synthesis import sweep_views

SWEEP = "p/<slug:slug>/syntheses/sweeps/<int:sweep_id>/"

urlpatterns: list[URLPattern] = [
    path("p/<slug:slug>/syntheses/sweeps/", sweep_views.sweeps_page, name="synthesis-sweeps"),
    path(SWEEP, sweep_views.sweep_page, name="synthesis-sweep"),
    path(SWEEP + "resume/", sweep_views.sweep_resume_view, name="synthesis-sweep-resume"),
]
