"""The demo's rubric review: the baseline rubric grader selected, and generated rubrics for a
few demo tasks (labeling/demo_data/generated_rubrics.json, written for this project), so a
reviewer can try inline edits, re-checks and history although the bundled 135M judge cannot
write usable rubrics itself."""

import json

from graders.engine.programs import Criterion, GeneratedRubric
from graders.models import GraderSelection
from graders.services import baselines_ensure, grader_promote
from labeling.demo import DEMO_FILE
from labeling.models import Project, Task
from reviews.rubric_generation import generated_rubric_store
from reviews.rubric_grader import grader_origin

DEMO_RUBRICS = DEMO_FILE.parent / "generated_rubrics.json"
DEMO_EDITOR = "demo data (written for the demo)"


def demo_rubrics_load(*, project: Project) -> int:
    """Select the baseline rubric grader unless a rubric grader is selected already, and store
    the demo's generated rubrics under it; returns how many were stored."""
    selected = GraderSelection.objects.filter(project=project, kind="rubric").order_by("-version")
    current = selected.first()
    if current is None:
        grader = next(g for g in baselines_ensure(project=project) if g.kind == "rubric")
        grader_promote(project=project, metagrader=grader, note="The demo's rubric grader.")
    else:
        grader = current.metagrader
    origin = grader_origin(grader)
    rubrics = json.loads(DEMO_RUBRICS.read_text(encoding="utf-8"))["rubrics"]
    tasks = dict(
        Task.objects.filter(project=project, external_id__in=list(rubrics)).values_list(
            "external_id", "pk"
        )
    )
    stored = 0
    for external_id, items in rubrics.items():
        if external_id not in tasks:
            continue
        criteria = tuple(Criterion(i["id"], i["text"], i["weight"]) for i in items)
        written = GeneratedRubric(external_id, criteria, None, ())
        outcome = generated_rubric_store(
            task_pk=tasks[external_id], origin=origin, generated=written, editor=DEMO_EDITOR
        )
        stored += outcome != "unchanged"
    return stored
