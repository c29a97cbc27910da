from django.urls import path

from labeling import label_views, settings_views, views

urlpatterns = [
    path("", views.project_list, name="project-list"),
    path("projects/new/", settings_views.project_new, name="project-new"),
    path("p/<slug:slug>/", views.project_overview_page, name="project-overview"),
    path("p/<slug:slug>/settings/", settings_views.settings_page, name="project-settings"),
    path(
        "p/<slug:slug>/settings/dimensions/",
        settings_views.dimension_add_view,
        name="project-dimension-add",
    ),
    path(
        "p/<slug:slug>/settings/dimensions/<int:dimension_id>/",
        settings_views.dimension_update_view,
        name="project-dimension-update",
    ),
    path(
        "p/<slug:slug>/settings/members/",
        settings_views.member_add_view,
        name="project-member-add",
    ),
    path(
        "p/<slug:slug>/settings/members/<int:membership_id>/",
        settings_views.member_update_view,
        name="project-member-update",
    ),
    path("p/<slug:slug>/tasks/", views.task_list, name="task-list"),
    path("p/<slug:slug>/tasks/<path:task_id>/", views.task_page, name="task-detail"),
    path("p/<slug:slug>/import/", views.import_page, name="import"),
    path("p/<slug:slug>/import/sample.jsonl", views.import_sample, name="import-sample"),
    path("p/<slug:slug>/export/", views.export_download, name="export"),
    path("p/<slug:slug>/splits/", views.splits_page, name="splits"),
    path("p/<slug:slug>/label/", label_views.label_page, name="label"),
    path("p/<slug:slug>/label/<int:assignment_id>/", label_views.label_revise, name="label-revise"),
    path(
        "p/<slug:slug>/label/<int:assignment_id>/submit/",
        label_views.label_submit_view,
        name="label-submit",
    ),
    path("p/<slug:slug>/queue/", label_views.queue_page, name="queue"),
    path("p/<slug:slug>/queue/strategy/", label_views.queue_strategy_set, name="queue-strategy"),
    path("p/<slug:slug>/queue/refresh/", label_views.queue_refresh_now, name="queue-refresh"),
    path("p/<slug:slug>/agreement/", label_views.agreement_page, name="agreement"),
    path("p/<slug:slug>/annotators/", label_views.annotators_page, name="annotators"),
    path("p/<slug:slug>/grade/", label_views.grade_page, name="grade"),
    path("p/<slug:slug>/grade/<int:response_pk>/", label_views.grade_submit, name="grade-submit"),
    path("p/<slug:slug>/jobs/", views.jobs_page, name="jobs"),
    path("jobs/", views.jobs_page, name="jobs-all"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("notifications/", views.notifications_page, name="notifications"),
    path("notifications/read/", views.notifications_read_all, name="notifications-read"),
    path("notifications/badge/", views.notifications_badge, name="notifications-badge"),
    path(
        "p/<slug:slug>/label/<int:assignment_id>/skip/", label_views.label_skip, name="label-skip"
    ),
    path(
        "p/<slug:slug>/label/<int:assignment_id>/flag/", label_views.label_flag, name="label-flag"
    ),
    path("p/<slug:slug>/my-labels/", label_views.my_labels_page, name="my-labels"),
    path("p/<slug:slug>/flags/", label_views.flags_page, name="flags"),
    path(
        "p/<slug:slug>/flags/<int:flag_id>/resolve/",
        label_views.flag_resolve_view,
        name="flag-resolve",
    ),
]
