"""The synthesis pages: runs, the funnel, human validation and the evaluator sweep."""

from django.urls import URLPattern, path

from graders.synthesis import api, export_views, funnel_views

urlpatterns: list[URLPattern] = [
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
