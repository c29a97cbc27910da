"""What the review pages read: the generated rubrics of a grader, and for one task its
responses (blind), its expert rubric, and the judge's and the experts' verdict per response
and criterion with each criterion's trust.

The judge's verdicts come from the newest grading run of the rubric's program that finished
the task (Grade.criteria); the experts' from CriterionGrade rows on the same rubric items.
Responses are fetched without ids, source model or metadata, so the page cannot leak them."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, IntegerField, Max, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from graders.models import Grade, GradingItem, GradingRun, ItemStatus, Metagrader
from labeling.models import AuthorKind, CriterionGrade, Response, Rubric, RubricItem, Task
from labeling.rubric_items import rubric_grades_set_aside
from reviews.rubric_history import rubric_history
from reviews.rubric_recheck import recheck_view
from reviews.rubric_trust import Trust, attention_order, criterion_trust


@dataclass(frozen=True)
class Cell:
    judge: bool | None
    stale: bool  # the verdict was given on an earlier wording of the criterion
    experts: list[bool]

    @property
    def disagree(self) -> bool:
        return (
            self.judge is not None and not self.stale and any(e != self.judge for e in self.experts)
        )


@dataclass(frozen=True)
class CriterionRow:
    item: RubricItem
    trust: Trust
    cells: list[Cell]


@dataclass(frozen=True)
class Judgement:
    """The matrix criteria x responses, criteria in attention order (least trusted first)."""

    run: GradingRun | None
    responses: list[str]
    rows: list[CriterionRow]

    @property
    def disagreements(self) -> int:
        return sum(row.trust.disagree for row in self.rows)


def generated_rubric(*, task: Task, origin: str) -> Rubric | None:
    return (
        Rubric.objects.filter(task=task, author_kind=AuthorKind.GENERATED, origin=origin)
        .prefetch_related("items")
        .first()
    )


def expert_rubric(*, task: Task) -> Rubric | None:
    return (
        Rubric.objects.filter(task=task, author_kind=AuthorKind.EXPERT, origin="")
        .prefetch_related("items")
        .first()
    )


def responses_blind(*, task: Task) -> list[dict[str, Any]]:
    """The task's responses as "Response 1..n" with their text or turns, nothing else."""
    rows = Response.objects.filter(task=task).order_by("external_id").values("content", "messages")
    return [{"label": f"Response {n}", **row} for n, row in enumerate(rows, 1)]


def latest_graded_runs(*, task_pks: Iterable[int], grader: Metagrader) -> dict[int, int]:
    """For each task, the newest run of `grader` that finished grading it."""
    rows = (
        GradingItem.objects.filter(task_id__in=list(task_pks), run__metagrader=grader)
        .filter(status=ItemStatus.DONE)
        .values("task_id")
        .annotate(latest=Max("run_id"))
    )
    return {row["task_id"]: row["latest"] for row in rows}


def _verdicts(
    run_by_task: dict[int, int],
) -> dict[int, dict[tuple[int, str], tuple[bool, str]]]:
    """task -> (response pk, criterion key) -> (passed, the criterion text judged)."""
    verdicts: dict[int, dict[tuple[int, str], tuple[bool, str]]] = defaultdict(dict)
    grades = Grade.objects.filter(
        run_id__in=set(run_by_task.values()), response__task_id__in=list(run_by_task)
    ).values_list("run_id", "response_id", "response__task_id", "criteria")
    for run, response, task, criteria in grades:
        if run_by_task.get(task) != run:
            continue
        for criterion in criteria:
            if criterion.get("passed") is not None and not criterion.get("error"):
                verdicts[task][(response, criterion["id"])] = (
                    criterion["passed"],
                    criterion["text"],
                )
    return verdicts


def _expert_marks(rubric_pks: Iterable[int]) -> dict[int, list[tuple[int, str, bool]]]:
    marks: dict[int, list[tuple[int, str, bool]]] = defaultdict(list)
    rows = CriterionGrade.objects.filter(item__rubric_id__in=list(rubric_pks)).values_list(
        "item__rubric_id", "response_id", "item__key", "passed"
    )
    for rubric, response, key, passed in rows:
        marks[rubric].append((response, key, passed))
    return marks


def _current_verdicts(
    verdicts: dict[tuple[int, str], tuple[bool, str]], items: list[RubricItem]
) -> dict[tuple[int, str], bool]:
    texts = {item.key: item.text for item in items}
    return {
        (response, key): passed
        for (response, key), (passed, text) in verdicts.items()
        if texts.get(key) == text
    }


def judgement(*, rubric: Rubric, grader: Metagrader) -> Judgement:
    """The review page's matrix for one generated rubric."""
    task = rubric.task
    run_pk = latest_graded_runs(task_pks=[task.pk], grader=grader).get(task.pk)
    run = GradingRun.objects.select_related("job").get(pk=run_pk) if run_pk else None
    verdicts = _verdicts({task.pk: run_pk}).get(task.pk, {}) if run_pk else {}
    items = list(rubric.items.all())
    marks = _expert_marks([rubric.pk]).get(rubric.pk, [])
    trusts = criterion_trust(
        keys=[item.key for item in items],
        judge=_current_verdicts(verdicts, items),
        experts=marks,
    )
    response_pks = list(
        Response.objects.filter(task=task).order_by("external_id").values_list("pk", flat=True)
    )
    by_cell: dict[tuple[int, str], list[bool]] = defaultdict(list)
    for response, key, passed in marks:
        by_cell[(response, key)].append(passed)
    by_key = {item.key: item for item in items}
    rows = []
    for trust in attention_order(list(trusts.values())):
        item = by_key[trust.key]
        cells = []
        for response in response_pks:
            verdict = verdicts.get((response, item.key))
            cells.append(
                Cell(
                    judge=None if verdict is None else verdict[0],
                    stale=verdict is not None and verdict[1] != item.text,
                    experts=by_cell.get((response, item.key), []),
                )
            )
        rows.append(CriterionRow(item, trust, cells))
    labels = [f"Response {n}" for n in range(1, len(response_pks) + 1)]
    return Judgement(run=run, responses=labels, rows=rows)


def rubrics_browse(
    *, project_pk: int, origin: str, query: str = "", domain: str = "", split: str = ""
) -> QuerySet[Rubric]:
    """A grader's generated rubrics with their task and item count, by task id."""
    rubrics = Rubric.objects.filter(
        task__project_id=project_pk, author_kind=AuthorKind.GENERATED, origin=origin
    )
    if query:
        rubrics = rubrics.filter(task__external_id__icontains=query)
    if domain:
        rubrics = rubrics.filter(task__domain=domain)
    if split:
        rubrics = rubrics.filter(task__split=split)
    # A correlated count, computed for the rows of one page only.
    items = (
        RubricItem.objects.filter(rubric=OuterRef("pk"))
        .values("rubric")
        .annotate(n=Count("pk"))
        .values("n")[:1]
    )
    return (
        rubrics.select_related("task")
        .annotate(item_count=Coalesce(Subquery(items, output_field=IntegerField()), 0))
        .order_by("task__external_id")
    )


def disagreement_counts(*, rubrics: list[Rubric], grader: Metagrader) -> dict[int, int | None]:
    """Judge-expert disagreements per rubric on the current wording of its criteria; None
    where no finished run graded the task yet."""
    runs = latest_graded_runs(task_pks=[r.task_id for r in rubrics], grader=grader)
    verdicts = _verdicts(runs) if runs else {}
    marks = _expert_marks([r.pk for r in rubrics])
    items: dict[int, list[RubricItem]] = defaultdict(list)
    for item in RubricItem.objects.filter(rubric__in=rubrics):
        items[item.rubric_id].append(item)
    counts: dict[int, int | None] = {}
    for rubric in rubrics:
        if rubric.task_id not in runs:
            counts[rubric.pk] = None
            continue
        trusts = criterion_trust(
            keys=[item.key for item in items[rubric.pk]],
            judge=_current_verdicts(verdicts.get(rubric.task_id, {}), items[rubric.pk]),
            experts=marks.get(rubric.pk, []),
        )
        counts[rubric.pk] = sum(t.disagree for t in trusts.values())
    return counts


def review_state(*, rubric: Rubric, grader: Metagrader) -> dict[str, Any]:
    """The parts of the review page that an edit or a re-check changes."""
    return {
        "rubric": rubric,
        "items": list(rubric.items.all()),
        "judgement": judgement(rubric=rubric, grader=grader),
        "recheck": recheck_view(rubric=rubric, grader=grader),
        "history": rubric_history(rubric=rubric),
        "set_aside": rubric_grades_set_aside(rubric),
    }


def review_page(*, rubric: Rubric, grader: Metagrader) -> dict[str, Any]:
    """Everything the review page shows of one task's generated rubric."""
    task = rubric.task
    return {
        "task": task,
        "documents": list(task.documents.all()),
        "responses": responses_blind(task=task),
        "expert_rubric": expert_rubric(task=task),
        **review_state(rubric=rubric, grader=grader),
    }
