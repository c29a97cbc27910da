"""Schema of the review side: blind audits of rubric criteria and their verdicts.

Who wrote a criterion lives only here (through the rubric item and the `author_kind` copy on
the verdict); the auditor's prompt never carries it (graders.engine.audit)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from graders.engine.audit import GROUNDINGS, SPECIFICITIES
from graders.models import JudgeEndpoint
from labeling.models import AuthorKind, Job, Project, RubricItem, Task


class AuditRun(models.Model):
    """A blind audit of every criterion of every rubric of a set of tasks. The tasks are
    fixed when it starts (`tasks`); `split` and `task_ids` record how they were chosen."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="audit_runs")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="audit_run")
    endpoint = models.ForeignKey(JudgeEndpoint, on_delete=models.PROTECT, related_name="audits")
    split = models.CharField(max_length=16, blank=True, default="")
    task_ids = models.JSONField(default=list, blank=True)
    tasks = models.ManyToManyField(Task, related_name="+")
    # Seeds the shuffle of criteria across authors, so the order of calls says nothing.
    seed = models.PositiveIntegerField(default=0)
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"audit {self.pk} of {self.split or 'chosen tasks'}"


class AuditVerdict(models.Model):
    """The auditor's verdict on one criterion. `criterion_text` and `author_kind` are copied
    from the rubric item when it is audited, so a finished audit's report stays the same when
    a reviewer later edits or deletes the criterion (the item link then becomes null).

    `quote` is the passage the auditor gave; with `quote_missing` it was claimed as support or
    contradiction but is not in the documents, and grounding was recorded as unverifiable. The
    verdicts are empty when `error` says the call failed."""

    run = models.ForeignKey(AuditRun, on_delete=models.CASCADE, related_name="verdicts")
    rubric_item = models.ForeignKey(
        RubricItem, null=True, on_delete=models.SET_NULL, related_name="audit_verdicts"
    )
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="audit_verdicts")
    author_kind = models.CharField(max_length=16, choices=AuthorKind.choices)
    criterion_text = models.TextField()
    specificity = models.CharField(
        max_length=16, blank=True, default="", choices=[(s, s) for s in SPECIFICITIES]
    )
    grounding = models.CharField(
        max_length=16, blank=True, default="", choices=[(g, g) for g in GROUNDINGS]
    )
    quote = models.TextField(blank=True, default="")
    omission = models.BooleanField(null=True)
    quote_missing = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")
    trace = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task__external_id", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["run", "rubric_item"], name="audit_verdict_unique"),
            models.CheckConstraint(
                condition=Q(author_kind__in=AuthorKind.values), name="audit_verdict_author"
            ),
            models.CheckConstraint(
                condition=Q(specificity__in=["", *SPECIFICITIES]),
                name="audit_verdict_specificity",
            ),
            models.CheckConstraint(
                condition=Q(grounding__in=["", *GROUNDINGS]), name="audit_verdict_grounding"
            ),
        ]
        indexes = [models.Index(fields=["run", "author_kind"])]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.rubric_item_id}: {self.grounding or self.error[:40]}"

    @property
    def flags(self) -> list[str]:
        """Why the report lists this criterion; empty when it passed every check."""
        return [
            label
            for label, raised in (
                ("contradicted", self.grounding == "contradicted"),
                ("unverifiable", self.grounding == "unverifiable"),
                ("generic", self.specificity == "generic"),
                ("omission-prone", self.omission is True),
            )
            if raised
        ]
