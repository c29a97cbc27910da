"""Fixtures of the search tests: a project whose D_selection, D_eval and D_meta hold the same
kind of task, and a fake judge that rewards programs which verify against the documents."""

import json
from pathlib import Path
from typing import Any

import pytest

from graders.engine.proposer import VERIFY_INSTRUCTION
from graders.models import JudgeEndpoint
from labeling.imports import jsonl_import
from labeling.models import Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

DOCUMENT = "Clause 4: the seller's liability is capped at 10% of the price."
QUALITY = {"GOOD": 0.9, "OKAY": 0.5, "POOR": 0.2}
# What a verify step that sees the documents answers: OKAY and POOR land within the 0.1
# tolerance of each other, so that pair earns half credit.
VERIFIED = {"GOOD": 0.9, "OKAY": 0.5, "POOR": 0.45}
SPLITS = {
    "selection": [("s0", "legal"), ("s1", "legal"), ("s2", "finance")],
    "eval": [("e0", "legal"), ("e1", "tax")],
    "meta": [("m0", "legal")],
}


def _answer(schema: dict[str, Any], score: float) -> str:
    return json.dumps(_value(schema, score))


def _value(spec: dict[str, Any], score: float) -> Any:
    """A value that fits `spec`: the score for numbers, a one-item list, an object of such."""
    kind = spec.get("type")
    if kind == "object":
        return {name: _value(field, score) for name, field in spec.get("properties", {}).items()}
    if kind in ("number", "integer"):
        minimum = spec.get("minimum", 0)
        return max(minimum, min(spec.get("maximum", score), score if minimum < 1 else minimum))
    if kind == "array":
        item = spec.get("items", {"type": "string"})
        return [_value(item, score) if item.get("type") != "string" else "states the cap"]
    if kind == "boolean":
        return True
    if "enum" in spec:
        return spec["enum"][0]
    return "noted"


def verifying_responder(body: dict[str, Any]) -> str:
    text = "\n".join(str(m["content"]) for m in body["messages"])
    schema = body["response_format"]["json_schema"]["schema"]
    word = next((w for w in QUALITY if f"{w} answer" in text), None)
    if word is not None and VERIFY_INSTRUCTION[:40] in text and "Clause 4" in text:
        return _answer(schema, VERIFIED[word])
    return _answer(schema, 0.5)


@pytest.fixture
def search_project(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, Any]] = []
    for split, tasks in SPLITS.items():
        for task, domain in tasks:
            records.append({"type": "task", "id": task, "prompt": f"Summarise the risk in deal {task}.",
                            "domain": domain, "split": split,
                            "documents": [{"id": "spa", "title": "SPA", "text": DOCUMENT}]})  # fmt: skip
            for word, truth in QUALITY.items():
                response = f"{task}/{word.lower()}"
                records.append({"type": "response", "id": response, "task": task,
                                "content": f"{word} answer for {task}"})  # fmt: skip
                records.append({"type": "score", "response": response, "value": truth})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "search.jsonl", records))
    return project


@pytest.fixture
def search_judge(search_project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = verifying_responder
    return JudgeEndpoint.objects.create(
        project=search_project,
        name="fake",
        base_url=fake_judge.base_url,
        model="fake-judge",
        max_concurrency=4,
        is_default=True,
    )
