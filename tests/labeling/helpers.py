import json
from pathlib import Path
from typing import Any

from labeling.exports import labels_records
from labeling.models import (
    Annotator,
    CriterionGrade,
    Dimension,
    Document,
    JudgeScore,
    Preference,
    Project,
    Response,
    Rubric,
    RubricItem,
    RubricRevision,
    Score,
    Task,
)

MODELS = (
    Annotator, CriterionGrade, Dimension, Document, JudgeScore, Preference, Response, Rubric,
    RubricItem, RubricRevision, Score, Task,
)  # fmt: skip


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """Write records (dicts are dumped, str/bytes written as they are) one per line."""
    with open(path, "wb") as out:
        for record in records:
            if isinstance(record, dict):
                record = json.dumps(record)
            if isinstance(record, str):
                record = record.encode()
            out.write(record + b"\n")
    return path


def db_state(project: Project) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Row counts of every labeling table plus the full export: equal states, equal values."""
    counts = {model.__name__: model.objects.count() for model in MODELS}
    return counts, list(labels_records(project=project))


def basic_records() -> list[dict[str, Any]]:
    """A small valid file: one dimension, two tasks, four responses (one a trajectory), a rubric,
    grades, scores, preferences and judge scores, deliberately out of dependency order."""
    return [
        {"type": "preference", "a": "t1/r1", "b": "t1/r2", "choice": "a", "confidence": 2,
         "dimension": "correctness", "provider": "human", "annotator": "alice"},
        {"type": "response", "id": "t1/r1", "task": "t1", "content": "Answer one", "source": "m-1"},
        {"type": "response", "id": "t1/r2", "task": "t1", "source": "m-2", "messages": [
            {"role": "user", "content": "Cancel my booking"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"name": "get_reservation", "arguments": {"id": "EHGLP3"}}]},
            {"role": "tool", "name": "get_reservation", "content": "{\"status\": \"booked\"}"},
            {"role": "assistant", "content": "Done."}]},
        {"type": "task", "id": "t1", "domain": "airline", "prompt": "Cancel EHGLP3",
         "documents": [{"id": "policy", "title": "Policy", "text": "No refunds after 24h."}],
         "split": "meta", "metadata": {"k": 1}},
        {"type": "task", "id": "t2", "domain": "legal", "prompt": "Review the SPA"},
        {"type": "response", "id": "t2/r1", "task": "t2", "content": "Memo A"},
        {"type": "response", "id": "t2/r2", "task": "t2", "content": "Memo B"},
        {"type": "dimension", "name": "correctness", "description": "Is it right?"},
        {"type": "rubric", "task": "t1", "author": "expert",
         "items": [{"id": "c1", "text": "Refuses the refund.", "weight": 2.0},
                   {"id": "c2", "text": "Cites the 24h rule.", "weight": 1.0}]},
        {"type": "criterion_grade", "response": "t1/r1", "item": "c1", "passed": True,
         "annotator": "alice"},
        {"type": "score", "response": "t1/r1", "value": 0.9, "provider": "true_grader"},
        {"type": "score", "response": "t1/r2", "value": 0.2},
        {"type": "preference", "a": "t2/r2", "b": "t2/r1", "choice": "tie", "provider": "synthetic",
         "annotator": "steer-gen"},
        {"type": "judge_score", "judge": "j1", "response": "t1/r1", "run": 0, "score": 0.7},
        {"type": "judge_score", "judge": "j1", "response": "t1/r2", "run": 0, "score": None},
        {"type": "judge_score", "judge": "j1", "response": "t1/r1", "dimension": "correctness",
         "run": 1, "score": 0.5},
    ]  # fmt: skip
