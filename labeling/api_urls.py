from django.urls import path

from labeling import api

urlpatterns = [
    path("projects/", api.projects_list, name="api-projects"),
    path("projects/<slug:slug>/", api.project_detail, name="api-project"),
    path("projects/<slug:slug>/tasks/", api.tasks_list, name="api-tasks"),
    path("projects/<slug:slug>/tasks/<path:task_id>/", api.task_get, name="api-task"),
    path("projects/<slug:slug>/import/", api.import_create, name="api-import"),
    path("projects/<slug:slug>/export/", api.export_get, name="api-export"),
    path("projects/<slug:slug>/splits/", api.splits_create, name="api-splits"),
    path("p/<slug:slug>/queue/next", api.queue_next, name="api-queue-next"),
    path("p/<slug:slug>/labels/", api.label_create, name="api-labels"),
    path("jobs/<int:job_id>/", api.job_get, name="api-job"),
    path("jobs/<int:job_id>/cancel/", api.job_cancel_create, name="api-job-cancel"),
    path("p/<slug:slug>/skips/", api.skip_create, name="api-skips"),
    path("p/<slug:slug>/flags/", api.flag_create, name="api-flags"),
]
