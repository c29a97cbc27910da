"""Fixtures of the rubric review tests: a project whose selected rubric grader (the baseline
rubric program) runs on a fake judge over real HTTP, with tasks whose three responses the true
grader ranks GOOD > OKAY > POOR.

The fake judge writes two criteria for every task and checks each by a table keyed on the
criterion's text and the response's quality word, so a test knows every verdict and reward."""

import json
from pathlib import Path
from typing import Any

import pytest

from graders.engine.baseline import baseline_program
from graders.models import JudgeEndpoint, Metagrader
from graders.services import grader_promote, metagrader_register
from labeling.imports import jsonl_import
from labeling.models import Annotator, CriterionGrade, Project, Response, Rubric
from reviews.rubric_generation import rubric_generation_execute, rubric_generation_start
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

CAP = "States the liability cap."
CLAUSE = "Cites clause 4."
CLAUSE_FIXED = "Cites clause 4 of the SPA and its 10% cap."
WRITTEN = [{"text": CAP, "weight": 2}, {"text": CLAUSE, "weight": 1}]
TRUTH = {"GOOD": 0.9, "OKAY": 0.5, "POOR": 0.2}
# The judge's verdict per criterion text and response quality. CLAUSE rewards the POOR answer
# and fails the GOOD one, so the rubric misranks; CLAUSE_FIXED repairs that.
VERDICTS = {
    CAP: {"GOOD": True, "OKAY": True, "POOR": False},
    CLAUSE: {"GOOD": False, "OKAY": True, "POOR": True},
    CLAUSE_FIXED: {"GOOD": True, "OKAY": False, "POOR": False},
}


def criterion_in(text: str) -> str | None:
    # Longest first: CLAUSE is a prefix of CLAUSE_FIXED.
    return next((c for c in sorted(VERDICTS, key=len, reverse=True) if c in text), None)


def review_responder(body: dict[str, Any]) -> str:
    """Writes WRITTEN as the rubric; checks a criterion by VERDICTS (unknown texts fail)."""
    text = "\n".join(str(m["content"]) for m in body["messages"])
    schema = json.dumps(body.get("response_format", {}))
    if '"criteria"' in schema:
        return json.dumps({"criteria": WRITTEN})
    quality = next(word for word in TRUTH if f"{word} answer" in text)
    criterion = criterion_in(text)
    return json.dumps({"verdict": bool(criterion and VERDICTS[criterion][quality])})


def review_records(tasks: list[tuple[str, str, str]], hostile: str = "") -> list[dict[str, Any]]:
    """(task id, split, domain) -> task, responses, true scores and an expert rubric."""
    records: list[dict[str, Any]] = []
    for task, split, domain in tasks:
        records.append({"type": "task", "id": task, "prompt": f"Summarise the risk in deal {task}.",
                        "split": split, "domain": domain,
                        "documents": [{"id": "spa", "title": "SPA", "text": "Clause 4: cap of **10%**."}]})  # fmt: skip
        records.append({"type": "rubric", "task": task,
                        "items": [{"id": "e1", "text": "Mentions the 10% cap.", "weight": 3}]})  # fmt: skip
        for word, truth in TRUTH.items():
            response = f"{task}/{word.lower()}-secret-model"
            records.append({"type": "response", "id": response, "task": task, "source": "secret-model",
                            "content": f"{word} answer for {task}. {hostile}"})  # fmt: skip
            records.append({"type": "score", "response": response, "value": truth})
    return records


@pytest.fixture
def review_project(project: Project, tmp_path: Path) -> Project:
    records = review_records(
        [("t0", "eval", "legal"), ("t1", "eval", "tax"), ("t2", "meta", "legal")]
    )
    jsonl_import(project=project, path=write_jsonl(tmp_path / "review.jsonl", records))
    return project


@pytest.fixture
def rubric_grader_selected(review_project: Project) -> Metagrader:
    grader = metagrader_register(
        project=review_project, program=baseline_program("rubric").to_json(), origin="baseline"
    )
    grader_promote(project=review_project, metagrader=grader)
    return grader


@pytest.fixture
def review_judge(review_project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = review_responder
    return JudgeEndpoint.objects.create(
        project=review_project,
        name="fake",
        base_url=fake_judge.base_url,
        model="fake-judge",
        max_concurrency=4,
        is_default=True,
    )


def generate(project: Project, task_ids: list[str], **kwargs: Any) -> dict[str, Any]:
    """Start a generation job and run it here, as the worker would."""
    job = rubric_generation_start(project=project, task_ids=task_ids, **kwargs)
    return rubric_generation_execute(job_id=job.pk)


@pytest.fixture
def generated(
    review_project: Project, rubric_grader_selected: Metagrader, review_judge: JudgeEndpoint
) -> Rubric:
    """The generated rubric of t0."""
    generate(review_project, ["t0"])
    return Rubric.objects.get(task__external_id="t0", author_kind="generated")


def expert_marks(rubric: Rubric, marks: dict[tuple[str, str], bool], name: str = "lena") -> None:
    """CriterionGrade rows of one expert: (criterion key, quality word) -> passed."""
    annotator, _ = Annotator.objects.get_or_create(project=rubric.task.project, name=name)
    for (key, word), passed in marks.items():
        CriterionGrade.objects.create(
            project=rubric.task.project,
            response=Response.objects.get(task=rubric.task, content__startswith=f"{word} answer"),
            item=rubric.items.get(key=key),
            annotator=annotator,
            passed=passed,
        )
