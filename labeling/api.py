"""REST API: one view per operation, the same services and access rules as the pages."""

from dataclasses import asdict

from django.http import Http404, StreamingHttpResponse
from rest_framework import serializers, status
from rest_framework.decorators import api_view, parser_classes
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FileUploadParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from labeling.access import Perm, ProjectAccess, job_access, project_access
from labeling.exports import EXPORT_KINDS, export_records
from labeling.flags import FlagInput, pair_flag
from labeling.import_jobs import UploadTooLarge, import_upload, rejection_payload
from labeling.imports import ImportRejected
from labeling.jobs import job_cancel
from labeling.jsonl import jsonl_lines
from labeling.models import INT_FIELD_MAX, FlagReason, Job, QueueAssignment, Task
from labeling.queue import (
    LabelInput,
    LabelRejected,
    annotator_for_user,
    assignment_own,
    assignment_skip,
    label_submit,
    pair_claim_next,
)
from labeling.selectors import (
    memberships_for_user,
    pair_view,
    project_overview,
    task_detail,
    tasks_browse,
)
from labeling.snapshots import label_export_record, snapshot_header
from labeling.splits import SplitFractionsInvalid, splits_assign


class TaskOutput(serializers.ModelSerializer):
    id = serializers.CharField(source="external_id")
    responses = serializers.IntegerField(source="response_count")
    labels = serializers.IntegerField(source="label_count")

    class Meta:
        model = Task
        fields = ["id", "domain", "split", "prompt", "instructions", "responses", "labels"]


class JobOutput(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Job
        fields = [
            "id", "kind", "project", "status", "stage", "done", "total", "percent", "cost",
            "error", "result", "created_at", "started_at", "finished_at",
        ]  # fmt: skip


class SplitInput(serializers.Serializer):
    fractions = serializers.DictField(child=serializers.FloatField(min_value=0, max_value=1))
    seed = serializers.IntegerField(default=0)
    holdout = serializers.ListField(child=serializers.CharField(allow_blank=True), default=list)


@api_view(["GET"])
def projects_list(request: Request) -> Response:
    return Response(
        [
            {"slug": m.project.slug, "name": m.project.name, "role": m.role, "tasks": m.task_count}
            for m in memberships_for_user(user=request.user)
        ]
    )


@api_view(["GET"])
def project_detail(request: Request, slug: str) -> Response:
    access = project_access(user=request.user, slug=slug)
    return Response(
        {
            "slug": slug,
            "name": access.project.name,
            "role": access.role,
            **project_overview(project=access.project),
        }
    )


@api_view(["GET"])
def tasks_list(request: Request, slug: str) -> Response:
    access = project_access(user=request.user, slug=slug)
    tasks = tasks_browse(
        project=access.project,
        query=request.query_params.get("q", ""),
        domain=request.query_params.get("domain", ""),
        split=request.query_params.get("split", ""),
    )
    paginator = PageNumberPagination()
    page = paginator.paginate_queryset(tasks, request)
    return paginator.get_paginated_response(TaskOutput(page, many=True).data)


@api_view(["GET"])
def task_get(request: Request, slug: str, task_id: str) -> Response:
    access = project_access(user=request.user, slug=slug)
    try:
        detail = task_detail(
            project=access.project, external_id=task_id, with_sources=access.can(Perm.SEE_SOURCES)
        )
    except Task.DoesNotExist:
        raise Http404 from None
    task = detail["task"]
    return Response(
        {
            "id": task.external_id,
            "domain": task.domain,
            "split": task.split,
            "prompt": task.prompt,
            "instructions": task.instructions,
            # Task metadata may carry how responses were made; blind readers do not get it.
            "metadata": task.metadata if access.can(Perm.SEE_SOURCES) else {},
            "documents": [
                {"id": d.external_id, "title": d.title, "text": d.text} for d in detail["documents"]
            ],
            "responses": [
                {("id" if k == "external_id" else k): v for k, v in r.items()}
                for r in detail["responses"]
            ],
        }
    )


@api_view(["POST"])
@parser_classes([MultiPartParser, FileUploadParser])
def import_create(request: Request, slug: str) -> Response:
    """Upload a JSONL file as multipart field 'file' or as the raw request body. Small files
    import at once (200 with counts, or 400 with every bad line); large ones return 202 and a
    job to poll."""
    access = project_access(user=request.user, slug=slug, perm=Perm.IMPORT)
    upload = request.data.get("file")
    if upload is None:
        return Response({"detail": "send the JSONL file as multipart field 'file'"}, status=400)
    try:
        outcome = import_upload(
            project=access.project, user=request.user, upload=upload, size=upload.size
        )
    except ImportRejected as exc:
        return Response(rejection_payload(exc), status=status.HTTP_400_BAD_REQUEST)
    except UploadTooLarge as exc:
        return Response({"detail": str(exc)}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(outcome, Job):
        return Response(JobOutput(outcome).data, status=status.HTTP_202_ACCEPTED)
    return Response(outcome.as_json())


@api_view(["GET"])
def export_get(request: Request, slug: str) -> StreamingHttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.EXPORT)
    kind = request.query_params.get("kind", "labels")
    if kind not in EXPORT_KINDS:
        raise Http404("Unknown export kind; use labels or pairs.")
    export = label_export_record(project=access.project, kind=kind, user=request.user)
    records = export_records(project=access.project, kind=kind)
    response = StreamingHttpResponse(jsonl_lines(records), content_type="application/x-ndjson")
    response["X-Label-Snapshot"] = snapshot_header(export)
    return response


@api_view(["POST"])
def splits_create(request: Request, slug: str) -> Response:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    data = SplitInput(data=request.data)
    data.is_valid(raise_exception=True)
    try:
        table = splits_assign(
            project=access.project,
            fractions=data.validated_data["fractions"],
            seed=data.validated_data["seed"],
            holdout_domains=tuple(data.validated_data["holdout"]),
        )
    except SplitFractionsInvalid as exc:
        return Response({"fractions": [str(exc)]}, status=400)
    return Response(table)


@api_view(["GET"])
def job_get(request: Request, job_id: int) -> Response:
    job, _ = job_access(user=request.user, job_id=job_id)
    return Response(JobOutput(job).data)


@api_view(["POST"])
def job_cancel_create(request: Request, job_id: int) -> Response:
    job, _ = job_access(user=request.user, job_id=job_id, cancel=True)
    job_cancel(job=job, by=request.user)
    job.refresh_from_db()
    return Response(JobOutput(job).data)


# The label API: an expert labels as themselves, through the same queue and label_submit as
# the label page, and sees exactly what that page shows.


class LabelIn(serializers.Serializer):
    assignment = serializers.IntegerField(min_value=1, max_value=INT_FIELD_MAX)
    # Ranges are label_submit's to check, so the page and the API refuse the same labels.
    side = serializers.CharField()
    confidence = serializers.IntegerField(
        required=False, allow_null=True, min_value=-INT_FIELD_MAX, max_value=INT_FIELD_MAX
    )
    seconds = serializers.FloatField(required=False, allow_null=True)


def _served_json(assignment: QueueAssignment) -> dict[str, object]:
    """The pair as pair_view gives it to the label page: task text, documents, dimension and
    the two responses' text or turns as left and right; no ids, models or metadata."""
    view = pair_view(assignment=assignment)
    dimension = view["dimension"]
    return {
        "assignment": assignment.pk,
        "prompt": view["prompt"],
        "instructions": view["instructions"],
        "documents": [{"title": d.title, "text": d.text} for d in view["documents"]],
        "dimension": None
        if dimension is None
        else {"name": dimension.name, "description": dimension.description},
        "left": view["left"],
        "right": view["right"],
        "current": None
        if view["current_side"] is None
        else {"side": view["current_side"], "confidence": view["current_confidence"]},
    }


@api_view(["POST"])
def queue_next(request: Request, slug: str) -> Response:
    """Claim the caller's next pair (or the one they left open): 200 with the pair as they
    see it, 204 when the queue has nothing left for them."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    annotator = annotator_for_user(project=access.project, user=request.user)
    assignment = pair_claim_next(project=access.project, annotator=annotator)
    if assignment is None:
        return Response(status=status.HTTP_204_NO_CONTENT)
    return Response(_served_json(assignment))


def _assignment_of(request: Request, access: ProjectAccess, assignment_id: int) -> QueueAssignment:
    annotator = annotator_for_user(project=access.project, user=request.user)
    assignment = assignment_own(
        project=access.project, annotator=annotator, assignment_id=assignment_id
    )
    if assignment is None:
        raise Http404("No such assignment of yours in this project.")
    return assignment


class AssignmentIn(serializers.Serializer):
    assignment = serializers.IntegerField(min_value=1, max_value=INT_FIELD_MAX)


class FlagIn(AssignmentIn):
    reason = serializers.ChoiceField(choices=FlagReason.choices)
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


@api_view(["POST"])
def skip_create(request: Request, slug: str) -> Response:
    """Pass one of the caller's unlabeled pairs on: it goes back to the queue for others and is
    not served to the caller again (204); 400 for a pair they labeled already."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    data = AssignmentIn(data=request.data)
    data.is_valid(raise_exception=True)
    assignment = _assignment_of(request, access, data.validated_data["assignment"])
    if not assignment_skip(assignment=assignment):
        return Response(
            {"assignment": ["labeled already: label it again to change the label"]},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return Response(status=status.HTTP_204_NO_CONTENT)


@api_view(["POST"])
def flag_create(request: Request, slug: str) -> Response:
    """Flag one of the caller's pairs with a reason (identical, unclear, offensive, other) and
    an optional note for the project's admins; an unlabeled pair is skipped too. Flagging again
    replaces the caller's reason and note (204)."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    data = FlagIn(data=request.data)
    data.is_valid(raise_exception=True)
    assignment = _assignment_of(request, access, data.validated_data["assignment"])
    flag = FlagInput(reason=data.validated_data["reason"], note=data.validated_data["note"])
    pair_flag(assignment=assignment, flag=flag)
    return Response(status=status.HTTP_204_NO_CONTENT)


@api_view(["POST"])
def label_create(request: Request, slug: str) -> Response:
    """Label one of the caller's assignments; again for the same one replaces their label."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    data = LabelIn(data=request.data)
    data.is_valid(raise_exception=True)
    assignment = _assignment_of(request, access, data.validated_data["assignment"])
    label = LabelInput(
        side=data.validated_data["side"],
        confidence=data.validated_data.get("confidence"),
        seconds=data.validated_data.get("seconds"),
    )
    try:
        label_submit(assignment=assignment, label=label)
    except LabelRejected as exc:
        return Response({exc.field: [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
    return Response({"assignment": assignment.pk, **asdict(label)})
