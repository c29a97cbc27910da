"""A project and a three-candidate search for the "Which grader wins" tests, graded for real
over HTTP by a scripted fake judge.

Every D_selection task has a GOOD, an OKAY and a POOR answer, imported in that order (so their
ids ascend), and the scripted expert prefers them in that order. The structured proposer's
best-of-2 at seed 0 proposes, beside the baseline's single `grade` step, a program that
re-checks the grade (`verify`, its reward) and one that averages the grade with a requirements
step. The judge answers by step:

    step          GOOD  OKAY  POOR
    grade         0.5   0.9   0.2    (baseline)
    verify        0.9   0.5   0.2    (verifier: the expert's order)
    requirements  1.0   0.0   1.0    mean with grade: 0.75 0.45 0.6 (averager)

so with the scalar tolerance 0.1 the candidates vote per task (+1: the lower id is better):

    pair          baseline  verifier  averager
    GOOD-OKAY     -1        +1        +1
    GOOD-POOR     +1        +1        +1      (everyone agrees: worth no label)
    OKAY-POOR     +1        +1        -1

The verifier agrees with the expert everywhere, the baseline errs on GOOD-OKAY and the
averager on OKAY-POOR.
"""

from pathlib import Path
from typing import Any

from graders.engine.proposer import REQUIREMENTS_INSTRUCTION, VERIFY_INSTRUCTION
from graders.models import Candidate, JudgeEndpoint, SearchRun
from graders.search import search_run_execute, search_start
from labeling.imports import jsonl_import
from labeling.models import Project, Response
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.conftest import _answer
from tests.labeling.helpers import write_jsonl

WORDS = ("GOOD", "OKAY", "POOR")  # the expert's order, best first
SCRIPT = {
    "verify": {"GOOD": 0.9, "OKAY": 0.5, "POOR": 0.2},
    "requirements": {"GOOD": 1.0, "OKAY": 0.0, "POOR": 1.0},
    "grade": {"GOOD": 0.5, "OKAY": 0.9, "POOR": 0.2},
}


def scripted_responder(body: dict[str, Any]) -> str:
    text = "\n".join(str(m["content"]) for m in body["messages"])
    schema = body["response_format"]["json_schema"]["schema"]
    word = next((w for w in WORDS if f"{w} answer" in text), None)
    if word is None:
        return _answer(schema, 0.5)
    step = (
        "verify"
        if VERIFY_INSTRUCTION[:40] in text
        else "requirements"
        if REQUIREMENTS_INSTRUCTION[:40] in text
        else "grade"
    )
    return _answer(schema, SCRIPT[step][word])


def which_wins_import(project: Project, tmp_path: Path, *, selection: int, train: int) -> None:
    """`selection` D_selection tasks with GOOD, OKAY and POOR answers, `train` train tasks with
    GOOD and POOR ones, and one imported expert label: s0's GOOD over its POOR, a pair every
    candidate orders the same way (the search needs a label on D_selection to rank by)."""
    records: list[dict[str, Any]] = []
    tasks = [(f"s{i}", "selection", WORDS) for i in range(selection)]
    tasks += [(f"t{i}", "train", ("GOOD", "POOR")) for i in range(train)]
    for task, split, words in tasks:
        records.append({"type": "task", "id": task, "prompt": f"Summarise the risk in {task}.",
                        "split": split, "domain": "legal"})  # fmt: skip
        for word in words:
            records.append({"type": "response", "id": f"{task}/{word.lower()}", "task": task,
                            "content": f"{word} answer for {task}"})  # fmt: skip
    records.append({"type": "preference", "a": "s0/good", "b": "s0/poor", "choice": "a",
                    "provider": "human", "annotator": "seed-expert"})  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "which-wins.jsonl", records))


def three_candidate_search(project: Project, fake_judge: FakeJudgeServer) -> SearchRun:
    fake_judge.responder = scripted_responder
    endpoint = JudgeEndpoint.objects.create(
        project=project,
        name="scripted",
        base_url=fake_judge.base_url,
        model="fake-judge",
        max_concurrency=4,
        is_default=True,
    )
    search = search_start(
        project=project, kind="scalar", mode="best_of_n", endpoint=endpoint, n=2, seed=0
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    return SearchRun.objects.select_related("project").get(pk=search.pk)


def candidate_named(search: SearchRun) -> dict[str, Candidate]:
    """The search's candidates by role: baseline, verifier, averager."""
    candidates = Candidate.objects.filter(search=search).select_related("metagrader")
    roles = {}
    for candidate in candidates:
        steps = {step["id"] for step in candidate.metagrader.program["steps"]}
        role = "verifier" if "verify" in steps else "averager" if "requirements" in steps else None
        roles[role or "baseline"] = candidate
    assert len(roles) == 3, f"expected three distinct candidates, got {roles}"
    return roles


def response_ids(project: Project) -> dict[str, int]:
    """Response pk by external id ("s0/good")."""
    return dict(Response.objects.filter(project=project).values_list("external_id", "pk"))
