from django.urls import path

from labeling import views

urlpatterns = [
    path("", views.project_list, name="project-list"),
    path("p/<slug:slug>/", views.project_overview_page, name="project-overview"),
    path("p/<slug:slug>/tasks/", views.task_list, name="task-list"),
    path("p/<slug:slug>/tasks/<path:task_id>/", views.task_page, name="task-detail"),
    path("p/<slug:slug>/import/", views.import_page, name="import"),
    path("p/<slug:slug>/export/", views.export_download, name="export"),
    path("p/<slug:slug>/splits/", views.splits_page, name="splits"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
]
