from django.urls import path

from graders import views

urlpatterns = [
    path("p/<slug:slug>/judges/", views.judges_page, name="judges"),
    path("p/<slug:slug>/graders/", views.graders_page, name="graders"),
    path("p/<slug:slug>/graders/<int:grader_id>/", views.program_page, name="program"),
    path("p/<slug:slug>/runs/<int:run_id>/", views.run_page, name="grading-run"),
    path("p/<slug:slug>/runs/<int:run_id>/resume/", views.run_resume, name="grading-run-resume"),
    path("p/<slug:slug>/grades/<int:grade_id>/trace/", views.trace_page, name="grade-trace"),
    path("p/<slug:slug>/meta-eval/", views.meta_eval_page, name="meta-eval"),
]
