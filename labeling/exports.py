"""Exports per FORMATS.md: labels in the import format, and chosen/rejected preference pairs.

Write them with labeling.jsonl.jsonl_write. Both stream rows with `.iterator()`, so a large
project never sits in memory at once.
"""

from collections import Counter, defaultdict
from collections.abc import Iterator
from itertools import batched
from typing import Any

from django.db.models import Prefetch

from labeling.models import (
    CriterionGrade,
    Dimension,
    JudgeScore,
    Preference,
    Project,
    Provider,
    Response,
    Rubric,
    Score,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    Task,
)

CHUNK = 2000


def _without_defaults(record: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in defaults or v != defaults[k]}


def labels_records(*, project: Project) -> Iterator[dict[str, Any]]:
    """Every record of the project in import order; importing them rebuilds the same state."""
    for dimension in Dimension.objects.filter(project=project):
        yield {"type": "dimension", "name": dimension.name, "description": dimension.description}
    tasks = Task.objects.filter(project=project).prefetch_related("documents").order_by("pk")
    for task in tasks.iterator(chunk_size=CHUNK):
        yield {
            "type": "task",
            "id": task.external_id,
            "domain": task.domain,
            "prompt": task.prompt,
            "instructions": task.instructions,
            "documents": [
                {"id": d.external_id, "title": d.title, "text": d.text}
                for d in task.documents.all()
            ],
            "split": task.split,
            "metadata": task.metadata,
        }
    responses = Response.objects.filter(project=project).select_related("task").order_by("pk")
    for response in responses.iterator(chunk_size=CHUNK):
        record: dict[str, Any] = {
            "type": "response",
            "id": response.external_id,
            "task": response.task.external_id,
        }
        if response.messages is None:
            record["content"] = response.content
        else:
            record["messages"] = response.messages
        record |= {"source": response.source_model, "metadata": response.metadata}
        yield record
    rubrics = (
        Rubric.objects.filter(task__project=project)
        .select_related("task")
        .prefetch_related("items")
        .order_by("pk")
    )
    for rubric in rubrics.iterator(chunk_size=CHUNK):
        yield _without_defaults(
            {
                "type": "rubric",
                "task": rubric.task.external_id,
                "author": rubric.author_kind,
                "origin": rubric.origin,
                "items": [
                    {"id": i.key, "text": i.text, "weight": i.weight} for i in rubric.items.all()
                ],
            },
            {"origin": ""},
        )
    grades = (
        CriterionGrade.objects.filter(response__project=project)
        .select_related("response", "item__rubric", "annotator")
        .order_by("pk")
    )
    for grade in grades.iterator(chunk_size=CHUNK):
        yield _without_defaults(
            {
                "type": "criterion_grade",
                "response": grade.response.external_id,
                "item": grade.item.key,
                "passed": grade.passed,
                "annotator": grade.annotator.name,
                "rubric": grade.item.rubric.author_kind,
                "origin": grade.item.rubric.origin,
                "note": grade.note,
            },
            {"origin": "", "note": ""},
        )
    scores = (
        Score.objects.filter(response__project=project).select_related("response").order_by("pk")
    )
    for score in scores.iterator(chunk_size=CHUNK):
        yield {
            "type": "score",
            "response": score.response.external_id,
            "value": score.value,
            "provider": score.provider,
        }
    judge_scores = (
        JudgeScore.objects.filter(response__project=project)
        .select_related("response", "dimension")
        .order_by("pk")
    )
    for row in judge_scores.iterator(chunk_size=CHUNK):
        yield _without_defaults(
            {
                "type": "judge_score",
                "judge": row.judge,
                "response": row.response.external_id,
                "dimension": row.dimension.name if row.dimension else None,
                "run": row.run,
                "score": row.score,
            },
            {"dimension": None},
        )
    preferences = (
        Preference.objects.filter(task__project=project, is_current=True)
        .select_related("response_a", "response_b", "dimension", "annotator")
        .order_by("pk")
    )
    for p in preferences.iterator(chunk_size=CHUNK):
        yield _without_defaults(
            {
                "type": "preference",
                "a": p.response_a.external_id,
                "b": p.response_b.external_id,
                "choice": p.choice,
                "confidence": p.confidence,
                "dimension": p.dimension.name if p.dimension else None,
                "provider": p.provider,
                "annotator": p.annotator.name,
                "slot_order": p.slot_order,
                "seconds_spent": p.seconds_spent,
            },
            {"confidence": None, "dimension": None, "slot_order": "", "seconds_spent": None},
        )
    yield from synthesis_records(project=project)


def synthesis_records(*, project: Project) -> Iterator[dict[str, Any]]:
    """Each synthesis and each of its draws as FORMATS.md "Synthesis records", with the
    optional extensions (votes' slot order and answers, outcome, error, usage) that make a
    generated synthesis round-trip. Steering text is not exported: labels files reach people
    who label."""
    undrawn = Prefetch(
        "cells",
        queryset=SynthesisCell.objects.filter(draws__isnull=True)
        .select_related("task", "dimension")
        .order_by("external_id"),
        to_attr="undrawn",
    )
    for synthesis in (
        Synthesis.objects.filter(project=project).prefetch_related(undrawn).order_by("pk")
    ):
        yield _without_defaults(
            {
                "type": "synthesis",
                "id": synthesis.external_id,
                "judges": synthesis.judges,
                "retries": synthesis.retries,
                "undrawn_cells": [
                    _without_defaults(
                        {
                            "id": cell.external_id,
                            "task": cell.task.external_id,
                            "dimension": cell.dimension.name,
                            "levels": [cell.low_level, cell.high_level],
                            "agent": cell.agent,
                            "error": cell.error,
                        },
                        {"agent": "", "error": ""},
                    )
                    for cell in synthesis.undrawn
                ],
            },
            {"undrawn_cells": []},
        )
    draws = (
        SynthesisDraw.objects.filter(cell__synthesis__project=project)
        .select_related(
            "cell__synthesis", "cell__task", "cell__dimension", "low_response", "high_response"
        )
        .prefetch_related("votes")
        .order_by("cell__synthesis_id", "cell__external_id", "retry")
    )
    for draw in draws.iterator(chunk_size=CHUNK):
        cell = draw.cell
        record: dict[str, Any] = {
            "type": "synthesis_draw",
            "synthesis": cell.synthesis.external_id,
            "cell": cell.external_id,
            "task": cell.task.external_id,
            "dimension": cell.dimension.name,
            "levels": [cell.low_level, cell.high_level],
            "retry": draw.retry,
            "agent": cell.agent,
        }
        if draw.low_response is not None and draw.high_response is not None:
            record["responses"] = [draw.low_response.external_id, draw.high_response.external_id]
        record["votes"] = [
            _without_defaults(
                {
                    "judge": v.judge,
                    "agrees": v.agrees,
                    "slot_order": v.slot_order,
                    "answers": v.answers,
                },
                {"slot_order": "", "answers": []},
            )
            for v in draw.votes.all()
        ]
        record |= {
            "cost": draw.cost,
            "outcome": draw.outcome,
            "error": draw.error,
            "usage": draw.usage,
        }
        yield _without_defaults(record, {"agent": "", "error": "", "usage": {}})


def response_text(response: Response) -> str | list[dict[str, Any]]:
    return response.content if response.messages is None else response.messages


def pairs_records(*, project: Project) -> Iterator[dict[str, Any]]:
    """One chosen/rejected record per pair (and dimension) whose current human labels have a
    strict majority for one side. Ties count as votes, so a pair split evenly or won by ties is
    left out; confidence is the mean confidence of the majority's labels, when they gave one."""
    votes: dict[tuple[int, int, int | None], Counter[int | None]] = defaultdict(Counter)
    confidences: dict[tuple[int, int, int | None, int | None], list[int]] = defaultdict(list)
    # People's labels only: judge and synthetic opinions must not become training labels.
    rows = Preference.objects.filter(
        task__project=project, is_current=True, provider=Provider.HUMAN
    ).values_list("response_a_id", "response_b_id", "choice", "confidence", "dimension_id")
    for a, b, choice, confidence, dimension in rows.iterator(chunk_size=CHUNK):
        pair = (min(a, b), max(a, b), dimension)
        winner = {"a": a, "b": b}.get(choice)
        votes[pair][winner] += 1
        if confidence is not None:
            confidences[(*pair, winner)].append(confidence)
    decided: list[tuple[int, int, int | None, int]] = []
    for pair, counter in votes.items():
        top, top_count = counter.most_common(1)[0]
        if top is not None and top_count * 2 > counter.total():
            decided.append((*pair, top))
    needed = sorted({pk for low, high, _, _ in decided for pk in (low, high)})
    responses: dict[int, Response] = {}
    for chunk in batched(needed, CHUNK):
        responses |= Response.objects.select_related("task").in_bulk(list(chunk))
    names = dict(Dimension.objects.filter(project=project).values_list("pk", "name"))
    for low, high, dimension, winner in sorted(decided, key=lambda d: (d[0], d[1], d[2] or 0)):
        chosen = responses[winner]
        rejected = responses[high if winner == low else low]
        confidence_list = confidences.get((low, high, dimension, winner))
        record: dict[str, Any] = {
            "prompt": chosen.task.prompt,
            "chosen": response_text(chosen),
            "rejected": response_text(rejected),
            "task": chosen.task.external_id,
            "confidence": (
                round(sum(confidence_list) / len(confidence_list), 3) if confidence_list else None
            ),
        }
        if dimension is not None:
            record["dimension"] = names[dimension]
        yield record


EXPORT_KINDS = {"labels": labels_records, "pairs": pairs_records}


def export_records(*, project: Project, kind: str) -> Iterator[dict[str, Any]]:
    """The records of one export kind; KeyError for an unknown kind."""
    return EXPORT_KINDS[kind](project=project)
