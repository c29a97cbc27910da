"""What the LLM proposer reads: D_meta rendered as engine data (tasks, documents, expert rubrics,
criterion-level grades, scores, preferences), and every prior candidate of a search with its
selection results and a few traces. Nothing from D_selection's labels or from D_eval goes in,
except the selection results the design says the proposer sees, and under a selection rule
with a split nothing from D_selection's untouched part."""

from collections import defaultdict

from graders.candidates import CandidateSelection, candidates_select
from graders.engine.programs import Criterion, DocumentInput, ResponseInput, response_render
from graders.engine.proposer_llm import MaterialResponse, MaterialTask, PriorCandidate
from graders.engine.selection import SelectionRule
from graders.evaluation import majority_oriented, metric_text
from graders.models import Candidate, CandidateStatus, Grade, SearchRun
from labeling.models import (
    AuthorKind,
    CriterionGrade,
    Preference,
    Project,
    Response,
    Rubric,
    Score,
    ScoreProvider,
    Split,
    Task,
)

# Traces shown per prior candidate: its best- and worst-rewarded response on D_selection.
TRACES_PER_CANDIDATE = 2
TRACE_STEP_CHARS = 600


def meta_material(project: Project) -> list[MaterialTask]:
    """Every D_meta task with its documents, expert rubric and labeled responses."""
    tasks = list(
        Task.objects.filter(project=project, split=Split.META).prefetch_related("documents")
    )
    responses: dict[int, list[Response]] = defaultdict(list)
    for response in Response.objects.filter(task__in=tasks).order_by("external_id"):
        responses[response.task_id].append(response)
    response_pks = [r.pk for group in responses.values() for r in group]
    scores: dict[int, float] = {}
    for provider in (ScoreProvider.EXPERT, ScoreProvider.TRUE_GRADER):  # true grader wins
        scores |= dict(
            Score.objects.filter(response_id__in=response_pks, provider=provider).values_list(
                "response_id", "value"
            )
        )
    rubrics = {
        rubric.task_id: rubric
        for rubric in Rubric.objects.filter(
            task__in=tasks, author_kind=AuthorKind.EXPERT
        ).prefetch_related("items")
    }
    passes: dict[int, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for response_pk, key, passed in CriterionGrade.objects.filter(
        response_id__in=response_pks, item__rubric__author_kind=AuthorKind.EXPERT
    ).values_list("response_id", "item__key", "passed"):
        passes[response_pk][key].append(passed)
    external = {r.pk: r.external_id for group in responses.values() for r in group}
    preferences: dict[int, list[tuple[str, str]]] = defaultdict(list)
    rows = Preference.objects.filter(
        task__in=tasks, is_current=True, provider="human", dimension__isnull=True
    ).values_list("response_a_id", "response_b_id", "choice", "task_id")
    for (task_pk, _, _), (winner, loser) in majority_oriented(rows).items():
        preferences[task_pk].append((external[winner], external[loser]))
    material = []
    for task in tasks:
        rubric = rubrics.get(task.pk)
        material.append(
            MaterialTask(
                id=task.external_id,
                domain=task.domain,
                prompt=task.prompt,
                instructions=task.instructions,
                documents=tuple(
                    DocumentInput(d.external_id, d.title, d.text) for d in task.documents.all()
                ),
                rubric=()
                if rubric is None
                else tuple(Criterion(i.key, i.text, i.weight) for i in rubric.items.all()),
                responses=tuple(
                    MaterialResponse(
                        id=r.external_id,
                        # As the judge reads it, so header-like lines in a message stay quoted.
                        text=response_render(
                            ResponseInput(
                                r.external_id,
                                r.content,
                                None if r.messages is None else tuple(r.messages),
                            )
                        ),
                        score=scores.get(r.pk),
                        # A criterion several experts graded counts as passed by majority.
                        criteria=tuple(
                            (key, sum(votes) * 2 > len(votes))
                            for key, votes in sorted(passes[r.pk].items())
                        ),
                    )
                    for r in responses[task.pk]
                ),
                preferences=tuple(sorted(preferences[task.pk])),
            )
        )
    return material


def prior_candidates(search: SearchRun) -> list[PriorCandidate]:
    """Every graded candidate of the search, oldest first, with what the selection rule tells
    the proposer about it, so the proposer's prompt can keep the best and the newest when it
    must cut. Under a rule with a split, its numbers and traces come from D_selection's
    feedback part only: the untouched part picks the winner and stays unseen."""
    graded = list(
        Candidate.objects.filter(search=search, status=CandidateStatus.GRADED)
        .select_related("metagrader", "selection_run")
        .order_by("iteration", "position")
    )
    chosen = candidates_select(search, graded)
    told = (
        {}
        if chosen is None
        else {
            c.pk: float(v)
            for c, v in zip(chosen.candidates, chosen.selection.feedback, strict=True)
        }
    )
    # Under a split rule, no task is known to be on the feedback side until a candidate has
    # been compared: then no trace at all.
    feedback_tasks = None
    if SelectionRule(search.selection_rule).splits:
        feedback_tasks = frozenset() if chosen is None else chosen.feedback_tasks
    return [
        PriorCandidate(
            name=c.metagrader.name,
            program=c.metagrader.program,
            results=candidate_results_text(c)
            if feedback_tasks is None
            else _feedback_results_text(c, told.get(c.pk), chosen),
            traces=_sample_traces(c, feedback_tasks),
            selection_score=told.get(c.pk),
        )
        for c in graded
        if c.metagrader is not None
    ]


def candidate_results_text(candidate: Candidate) -> str:
    evaluation = candidate.selection_run.evaluation if candidate.selection_run else {}
    parts = []
    for key, label in (
        ("tolerant_ranking_accuracy", "tolerant ranking accuracy"),
        ("ranking_accuracy", "ranking accuracy"),
    ):
        metric = evaluation.get(key)
        if metric:
            parts.append(f"{label} {metric_text(metric)}")
    if evaluation.get("pairs"):
        parts.append(f"on {evaluation['pairs']} pairs over {evaluation['tasks']} tasks")
    if evaluation.get("failed"):
        parts.append(f"{evaluation['failed']} of {evaluation['graded']} responses failed")
    if candidate.calls_per_response is not None:
        parts.append(f"{candidate.calls_per_response:.1f} judge calls per response")
    return "; ".join(parts) or evaluation.get("note", "no results")


def _feedback_results_text(
    candidate: Candidate, told: float | None, chosen: CandidateSelection | None
) -> str:
    """What a rule with a split tells the proposer: the value it answers for the feedback
    part, that part's size, and the cost, nothing measured on the untouched part."""
    if told is None or chosen is None:
        return "no results on the feedback part of D_selection"
    held = chosen.selection.untouched_tasks
    pairs = chosen.inputs.pairs if held is None else chosen.inputs.pairs[~held]
    parts = [
        f"tolerant ranking accuracy {told:.3f} on the feedback part of D_selection",
        f"on {int(pairs.sum())} pairs over {pairs.size} tasks",
    ]
    if candidate.calls_per_response is not None:
        parts.append(f"{candidate.calls_per_response:.1f} judge calls per response")
    return "; ".join(parts)


def _sample_traces(candidate: Candidate, tasks: frozenset[int] | None) -> tuple[str, ...]:
    """The candidate's best- and worst-rewarded responses on D_selection, from `tasks` only
    when given (a split rule's feedback part)."""
    if candidate.selection_run is None:
        return ()
    grades = Grade.objects.filter(run=candidate.selection_run, reward__isnull=False)
    if tasks is not None:
        grades = grades.filter(response__task_id__in=tasks)
    picked = {
        grade.pk: grade
        for grade in (
            grades.order_by("-reward", "pk").first(),
            grades.order_by("reward", "pk").first(),
        )
        if grade is not None
    }
    return tuple(_trace_text(grade) for grade in list(picked.values())[:TRACES_PER_CANDIDATE])


def _trace_text(grade: Grade) -> str:
    lines = [f"reward {grade.reward}"]
    for step in grade.trace:
        prompt = "\n".join(m.get("content", "") for m in step.get("messages", []))
        lines.append(
            f"[{step.get('step_id')} {step.get('label', '')}] prompt: "
            f"{_clip(prompt)}\noutput: {_clip(step.get('text') or step.get('error') or '')}"
        )
    return "\n".join(lines)


def _clip(text: str) -> str:
    if len(text) <= TRACE_STEP_CHARS:
        return text
    half = TRACE_STEP_CHARS // 2
    return f"{text[:half]} [...] {text[-half:]}"
