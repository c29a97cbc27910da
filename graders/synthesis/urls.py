"""The synthesis pages: runs, the funnel, human validation and the evaluator sweep."""

from django.urls import URLPattern, path

from graders.synthesis import funnel_views

urlpatterns: list[URLPattern] = [
    path(
        "p/<slug:slug>/synthesis/funnel/",
        funnel_views.synthesis_funnel_page,
        name="synthesis-funnel",
    ),
]
