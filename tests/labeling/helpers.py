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
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
    Task,
)

MODELS = (
    Annotator, CriterionGrade, Dimension, Document, JudgeScore, Preference, Response, Rubric,
    RubricItem, RubricRevision, Score, Synthesis, SynthesisCell, SynthesisDraw, SynthesisVote, Task,
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


def synthesis_records() -> list[dict[str, Any]]:
    """A small imported synthesis (FORMATS.md "Synthesis records"), out of dependency order:
    cascade j1, j2 and one retry. Cell c1 (bad-ok) is vetoed by j2 at retry 0 and kept at
    retry 1; cell c2 (ok-good) is kept at once; cell c3 (bad-good, no responses) is vetoed by
    j1 twice."""

    def draw(
        cell: str,
        task: str,
        levels: list[str],
        retry: int,
        votes: list[Any],
        responses: list[str] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        record = {
            "type": "synthesis_draw",
            "synthesis": "s1",
            "cell": cell,
            "task": task,
            "dimension": "friendliness",
            "levels": levels,
            "retry": retry,
            "agent": "m-a",
            "votes": [{"judge": j, "agrees": a} for j, a in votes],
            **extra,
        }
        if responses is not None:
            record["responses"] = responses
        return record

    return [
        draw("c1", "a1", ["bad", "ok"], 1, [("j1", True), ("j2", True)], ["a1/bad/1", "a1/ok/1"],
             cost=0.5),
        draw("c1", "a1", ["bad", "ok"], 0, [("j1", True), ("j2", False)],
             ["a1/bad/0", "a1/ok/0"], cost=0.25),
        draw("c2", "a2", ["ok", "good"], 0, [("j1", True), ("j2", True)],
             ["a2/ok/0", "a2/good/0"], cost=0.25),
        draw("c3", "a1", ["bad", "good"], 0, [("j1", False)]),
        draw("c3", "a1", ["bad", "good"], 1, [("j1", False)]),
        {"type": "synthesis", "id": "s1", "judges": ["j1", "j2"], "retries": 1},
        {"type": "dimension", "name": "friendliness", "description": "Warmth."},
        {"type": "task", "id": "a1", "domain": "airline", "prompt": "Cancel my flight"},
        {"type": "task", "id": "a2", "domain": "retail", "prompt": "Return my shoes"},
        *[{"type": "response", "id": f"a1/{level}/{retry}", "task": "a1",
           "content": f"{level} answer {retry}"}
          for level in ("bad", "ok") for retry in (0, 1)],
        {"type": "response", "id": "a2/ok/0", "task": "a2", "content": "Fine."},
        {"type": "response", "id": "a2/good/0", "task": "a2", "content": "Gladly!"},
    ]  # fmt: skip
