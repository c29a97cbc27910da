"""Grader bundles: one JSON document that carries a grader out of the workbench to a training
job (graders/engine/runtime.py reads it) or into another project.

A bundle holds the program and its content hash, the judge settings with the *name* of the
key's environment variable (never the key), every task of the project with its documents,
the generated rubrics the program already wrote (reviewed edits included), the label snapshot
the grader was selected on, and its latest evaluation on D_eval."""

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from graders.engine.programs import program_validate
from graders.engine.runtime import BUNDLE_FORMAT, BUNDLE_VERSION, load_bundle
from graders.grading import rubric_origin
from graders.models import (
    Candidate,
    GraderExport,
    GraderSelection,
    GradingRun,
    JudgeEndpoint,
    Metagrader,
    Origin,
)
from graders.services import metagrader_register
from labeling.models import AuthorKind, JobStatus, Project, Rubric, Split, Task
from labeling.rubric_items import rubric_items_replace

JUDGE_FIELDS = (
    "base_url", "model", "api_key_env", "temperature", "max_tokens", "max_concurrency",
    "timeout_s", "price_in_per_mtok", "price_out_per_mtok", "response_format",
)  # fmt: skip


def bundle_judge(endpoint: JudgeEndpoint) -> dict[str, Any]:
    """A bundle's judge settings: the endpoint's, with the key's variable name (None when the
    judge needs no key), never the key."""
    settings = {field: getattr(endpoint, field) for field in JUDGE_FIELDS}
    return settings | {"api_key_env": endpoint.api_key_env or None}


class BundleInvalid(ValueError):
    pass


def endpoint_for(metagrader: Metagrader) -> JudgeEndpoint | None:
    """The judge the grader was measured with: its latest run's, else the project default."""
    run = (
        GradingRun.objects.filter(metagrader=metagrader)
        .select_related("endpoint")
        .order_by("-created_at")
        .first()
    )
    if run is not None:
        return run.endpoint
    return JudgeEndpoint.objects.filter(project=metagrader.project, is_default=True).first()


def _selection_search_snapshot(metagrader: Metagrader) -> dict[str, Any]:
    """The labels the grader was chosen on: the snapshot of the search that promoted it, else
    of the latest search it won or was a candidate in; nulls when no search ever ranked it."""
    selection = (
        GraderSelection.objects.filter(metagrader=metagrader, search__isnull=False)
        .select_related("search__snapshot")
        .order_by("-selected_at")
        .first()
    )
    search = selection.search if selection else None
    if search is None:
        candidate = (
            Candidate.objects.filter(metagrader=metagrader)
            .select_related("search__snapshot")
            .order_by("-search__created_at")
            .first()
        )
        search = candidate.search if candidate else None
    snapshot = search.snapshot if search else None
    return {
        "id": snapshot.pk if snapshot else None,
        "hash": snapshot.content_hash if snapshot else None,
    }


def bundle_build(*, metagrader: Metagrader) -> dict[str, Any]:
    endpoint = endpoint_for(metagrader)
    if endpoint is None:
        raise BundleInvalid("the project has no judge endpoint to export with the grader")
    program = program_validate(metagrader.program)
    tasks = Task.objects.filter(project=metagrader.project).prefetch_related("documents")
    rubrics = Rubric.objects.filter(
        task__project=metagrader.project,
        author_kind=AuthorKind.GENERATED,
        origin=rubric_origin(program),
    ).prefetch_related("items")
    evaluation = (
        GradingRun.objects.filter(
            metagrader=metagrader, split=Split.EVAL, job__status=JobStatus.SUCCEEDED
        )
        .order_by("-created_at")
        .values_list("evaluation", flat=True)
        .first()
    )
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "exported_at": timezone.now().isoformat(),
        "project": metagrader.project.slug,
        "grader": {
            "id": metagrader.pk,
            "name": metagrader.name,
            "kind": metagrader.kind,
            "content_hash": program.content_hash,
            "program": program.to_json(),
        },
        "judge": bundle_judge(endpoint),
        "tasks": {
            task.external_id: {
                "prompt": task.prompt,
                "instructions": task.instructions,
                "documents": [
                    {"id": d.external_id, "title": d.title, "text": d.text}
                    for d in task.documents.all()
                ],
            }
            for task in tasks
        },
        "rubrics": {
            rubric.task.external_id: [
                {"id": item.key, "text": item.text, "weight": item.weight}
                for item in rubric.items.all()
            ]
            for rubric in rubrics.select_related("task")
        },
        "snapshot": _selection_search_snapshot(metagrader),
        "evaluation": evaluation or {},
    }


def bundle_export(*, metagrader: Metagrader, user: Any = None, token: Any = None) -> dict[str, Any]:
    """Build a bundle and record the export in the grader's lineage."""
    bundle = bundle_build(metagrader=metagrader)
    GraderExport.objects.create(
        project=metagrader.project,
        metagrader=metagrader,
        snapshot_id=bundle["snapshot"]["id"],
        user=user if getattr(user, "is_authenticated", False) else None,
        token=token,
    )
    return bundle


@transaction.atomic
def bundle_import(*, project: Project, bundle: dict[str, Any], user: Any = None) -> Metagrader:
    """Reproduce a bundle's grader in `project`: the program (same content hash), a judge
    endpoint with its settings (named after the model, unless an equal one exists), and its
    generated rubrics for the tasks this project has under the same ids."""
    try:
        load_bundle(bundle)
    except ValueError as exc:
        raise BundleInvalid(str(exc)) from exc
    metagrader = metagrader_register(
        project=project, program=bundle["grader"]["program"], origin=Origin.HUMAN, user=user
    )
    judge = bundle["judge"]
    settings = {field: judge.get(field) for field in JUDGE_FIELDS}
    settings["api_key_env"] = settings["api_key_env"] or ""
    endpoint = JudgeEndpoint.objects.filter(project=project, **settings).first()
    if endpoint is None:
        name = f"imported {judge['model']}"[:90]
        endpoint = JudgeEndpoint(project=project, name=name, **settings)
        try:  # the endpoint form's checks; BundleInvalid rolls the grader back
            endpoint.full_clean(exclude=["project"], validate_unique=False)
        except ValidationError as exc:
            raise BundleInvalid(
                "\n".join(
                    f"judge.{field}: {message}"
                    for field, messages in exc.message_dict.items()
                    for message in messages
                )
            ) from None
        base = endpoint.name
        suffix = 2
        while JudgeEndpoint.objects.filter(project=project, name=endpoint.name).exists():
            endpoint.name = f"{base} ({suffix})"
            suffix += 1
        endpoint.save()
    origin = rubric_origin(program_validate(metagrader.program))
    tasks = Task.objects.filter(project=project, external_id__in=list(bundle.get("rubrics", {})))
    for task in tasks:
        rubric, created = Rubric.objects.get_or_create(
            task=task, author_kind=AuthorKind.GENERATED, origin=origin
        )
        if created:
            rubric_items_replace(
                rubric=rubric,
                items=bundle["rubrics"][task.external_id],
                editor=f"bundle of grader {bundle['grader']['id']}",
            )
    return metagrader
