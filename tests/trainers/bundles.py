"""Bundles for the trainer tests, and the rewards the workbench gives the same responses.

    path = write_bundle(tmp_path, "pairwise", fake_judge)   # the file a trainer's script loads
    expected = in_app_rewards("pairwise", fake_judge, ["a good answer", "a poor answer"])

`write_bundle` writes an exported bundle (the export format of graders/engine/bundle.py) of one
of KINDS, with one task, TASK_ID (a lease question with one document), judged by the fake judge,
whose responder it sets to the quality judge of tests/graders/engine/test_runtime.py: scores and
comparisons go by a quality word in the response (excellent 1.0, good 0.75, fair 0.5, poor
0.25), rubric checks by the criterion's keyword ("notice", "excellent"). `in_app_rewards` grades
a group of responses to that task the way graders/grading.py does (the programs' grading
functions with a fresh judge client), which is what a trainer's rewards must equal."""

import json
from collections.abc import Sequence
from pathlib import Path

from graders.engine.programs import DocumentInput, TaskInput
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_runtime import (
    LEASE_TASK,
    PROGRAMS,
    bundle_dict,
    quality_judge,
    reference_rewards,
)

KINDS = tuple(PROGRAMS)  # scalar, pairwise, rubric, pairwise_rubric
TASK_ID = "lease"
TASK = TaskInput(
    id=TASK_ID,
    prompt=LEASE_TASK["prompt"],
    instructions=LEASE_TASK["instructions"],
    documents=tuple(DocumentInput(d["id"], d["title"], d["text"]) for d in LEASE_TASK["documents"]),
)


def write_bundle(folder: Path, kind: str, judge: FakeJudgeServer) -> Path:
    """An exported bundle of a `kind` grader against `judge`, as folder/<kind>-bundle.json."""
    judge.responder = quality_judge
    path = folder / f"{kind}-bundle.json"
    path.write_text(json.dumps(bundle_dict(PROGRAMS[kind], judge.base_url)))
    return path


def in_app_rewards(kind: str, judge: FakeJudgeServer, texts: Sequence[str]) -> list[float | None]:
    """The workbench's rewards for one group of responses to TASK_ID (None: a failed grade)."""
    judge.responder = quality_judge
    return reference_rewards(PROGRAMS[kind], judge.base_url, TASK, texts)
