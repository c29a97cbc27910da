"""Routes of rubric review: generation, the review page and inline editing.

Edits address the rubric by its id and the criterion by a `key` parameter: criterion ids are
the importer's strings and may hold any character, slashes included."""

from django.urls import path

from reviews import rubric_edit_views, views

RUBRIC = "p/<slug:slug>/rubrics/<int:rubric_id>/"

urlpatterns = [
    path("p/<slug:slug>/rubrics/", views.rubric_list, name="rubric-list"),
    path("p/<slug:slug>/rubrics/generate/", views.rubric_generate, name="rubric-generate"),
    path("p/<slug:slug>/rubrics/task/<path:task_id>/", views.rubric_review, name="rubric-review"),
    path(RUBRIC + "edit/", rubric_edit_views.criterion_edit, name="rubric-item-edit"),
    path(RUBRIC + "row/", rubric_edit_views.criterion_row, name="rubric-item-row"),
    path(RUBRIC + "save/", rubric_edit_views.criterion_save_view, name="rubric-item-save"),
    path(RUBRIC + "delete/", rubric_edit_views.criterion_delete_view, name="rubric-item-delete"),
    path(RUBRIC + "move/", rubric_edit_views.criterion_move_view, name="rubric-item-move"),
    path(RUBRIC + "restore/", rubric_edit_views.rubric_restore_view, name="rubric-restore"),
    path(RUBRIC + "recheck/", rubric_edit_views.rubric_recheck, name="rubric-recheck"),
    path(
        RUBRIC + "recheck/status/",
        rubric_edit_views.rubric_recheck_status,
        name="rubric-recheck-status",
    ),
]
