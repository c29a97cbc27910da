from django.urls import path

from graders import (
    alias_views,
    bundle_views,
    drift_views,
    judge_views,
    lineage_views,
    research_views,
    search_views,
    views,
)

JUDGE = "p/<slug:slug>/judges/<int:endpoint_id>/"
SEARCH = "p/<slug:slug>/searches/<int:search_id>/"
CANDIDATE = SEARCH + "candidates/<int:candidate_id>/"

urlpatterns = [
    path("p/<slug:slug>/judges/", judge_views.judges_page, name="judges"),
    path(JUDGE, judge_views.judge_edit, name="judge-edit"),
    path(JUDGE + "default/", judge_views.judge_default, name="judge-default"),
    path(JUDGE + "delete/", judge_views.judge_delete, name="judge-delete"),
    path("p/<slug:slug>/graders/", views.graders_page, name="graders"),
    path("p/<slug:slug>/graders/lineage/", lineage_views.lineage_page, name="lineage"),
    path("p/<slug:slug>/graders/import/", bundle_views.bundle_upload, name="bundle-import"),
    path(
        "p/<slug:slug>/graders/<int:grader_id>/bundle.json",
        bundle_views.bundle_download,
        name="bundle-download",
    ),
    path("p/<slug:slug>/graders/<int:grader_id>/", views.program_page, name="program"),
    path("p/<slug:slug>/graders/<int:grader_id>/drift/", drift_views.drift_page, name="drift"),
    path(
        "p/<slug:slug>/graders/<int:grader_id>/promote/",
        search_views.program_promote,
        name="program-promote",
    ),
    path(
        "p/<slug:slug>/graders/<int:grader_id>/alias/promote/",
        alias_views.alias_promote_view,
        name="alias-promote",
    ),
    path(
        "p/<slug:slug>/graders/<int:grader_id>/alias/rollback/",
        alias_views.alias_rollback_view,
        name="alias-rollback",
    ),
    path(
        "p/<slug:slug>/graders/<int:grader_id>/research/",
        research_views.grader_research,
        name="grader-research",
    ),
    path("p/<slug:slug>/runs/<int:run_id>/", views.run_page, name="grading-run"),
    path("p/<slug:slug>/runs/<int:run_id>/resume/", views.run_resume, name="grading-run-resume"),
    path("p/<slug:slug>/grades/<int:grade_id>/trace/", views.trace_page, name="grade-trace"),
    path("p/<slug:slug>/meta-eval/", views.meta_eval_page, name="meta-eval"),
    path("p/<slug:slug>/searches/", search_views.searches_page, name="searches"),
    path(SEARCH, search_views.search_page, name="search"),
    path(SEARCH + "cancel/", search_views.search_cancel, name="search-cancel"),
    path(SEARCH + "resume/", search_views.search_resume_view, name="search-resume"),
    path(SEARCH + "label-next/", search_views.search_label_next, name="search-label-next"),
    path(CANDIDATE, search_views.candidate_page, name="search-candidate"),
    path(CANDIDATE + "evaluate/", search_views.candidate_evaluate, name="candidate-evaluate"),
    path(CANDIDATE + "promote/", search_views.candidate_promote, name="candidate-promote"),
]
