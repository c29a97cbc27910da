from django.contrib import admin
from django.http import HttpRequest

from labeling import models


@admin.register(models.Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "overlap", "allow_ties", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(models.Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "project", "role"]
    list_filter = ["role", "project"]


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["external_id", "project", "domain", "split"]
    list_filter = ["project", "split", "domain"]
    search_fields = ["external_id", "prompt"]


@admin.register(models.Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "project", "status", "done", "total", "created_at"]
    list_filter = ["kind", "status"]


for model in (
    models.Annotator,
    models.Dimension,
    models.Document,
    models.Response,
    models.Rubric,
    models.RubricItem,
    models.CriterionGrade,
    models.Score,
    models.Preference,
    models.JudgeScore,
):
    admin.site.register(model)


@admin.register(models.Notification)
class NotificationAdmin(admin.ModelAdmin):
    """Read-mostly: labeling/notifications.py writes notifications where a job stops, so the
    admin neither adds them nor edits what they say; it may mark one read or delete it."""

    list_display = ["user", "text", "job", "created_at", "read_at"]
    list_filter = ["read_at"]
    search_fields = ["user__username", "text"]
    readonly_fields = ["user", "job", "text", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
