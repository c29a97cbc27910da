"""Metagrader search (DESIGN.md section 6) as one resumable job.

Round 0 is the kind's baseline plus `n` proposals; an evolutionary search adds `iterations`
rounds of `k`, each proposed from every candidate before it. Each candidate is graded on
D_selection; the search's selection rule (graders/candidates.py, DESIGN.md section 8b) says
what the proposer is told about it and which candidate is best. After each round the best so
far is graded on D_eval too, so the curve of selection against eval accuracy (and, for the
holdout rules, against D_selection's untouched part) shows overfitting as it happens. D_eval
never reaches the proposer.

Resuming: one worker runs a search at a time, under a lease it keeps fresh (labeling.jobs).
A worker that receives the search again, or starts while it is abandoned, takes the lease
once it is stale and goes on from what is stored: a round's proposals are stored together,
each candidate's grading run keeps its finished tasks, and every deterministic judge answer
is cached. Only the judge calls in flight when a worker died are made again."""

from typing import Any

import numpy as np
from django.db import transaction

from graders.candidates import CandidateSelection, candidates_select
from graders.engine.judge import Budget, Usage
from graders.engine.metrics import task_bootstrap_ci
from graders.engine.programs import KINDS
from graders.engine.selection import DEFAULT_RULE, FloatArray, SelectionRule
from graders.grading import run_budget, run_complete, run_finish, run_grade
from graders.models import (
    Candidate,
    CandidateStatus,
    GradingItem,
    GradingRun,
    ItemStatus,
    JudgeEndpoint,
    Metagrader,
    SearchMode,
    SearchRun,
    SelectionRuleChoice,
)
from graders.search_proposals import round_propose
from graders.services import GRADING_JOB, RunInvalid, grading_run_start
from labeling.jobs import (
    BudgetSpent,
    JobCancelled,
    JobHeartbeat,
    LeaseLost,
    budget_spent_text,
    job_budget_stop,
    job_create,
    job_progress,
    job_resend,
    job_run_leased,
)
from labeling.models import Job, JobStatus, Preference, Project, Response, Score, Split, Task
from labeling.queue import queue_refresh_soon
from labeling.snapshots import label_snapshot_take

SEARCH_JOB = "search"
MAX_CANDIDATES = 200
# Why a search left to the default rule ranks by argmax; stored on it and shown on its page.
TOO_FEW_TO_SPLIT = (
    "too few labeled D_selection tasks to hold any back: ranked by the point estimate"
)


# The scores that count as labels of a task for ranking candidates.
LABEL_SCORES = ("true_grader", "expert")


class SearchInvalid(ValueError):
    pass


def _graded_tasks(project: Project, split: str) -> list[int]:
    return list(
        Task.objects.filter(project=project, split=split, responses__isnull=False)
        .distinct()
        .values_list("pk", flat=True)
    )


def selection_problem(project: Project) -> str | None:
    """Why a search cannot rank candidates on this project's D_selection, or None. Asked on
    every Search page: existence checks, not the task lists a search reads (10,000 ids sent
    back as IN lists took half a second)."""
    tasks = Task.objects.filter(project=project, split=Split.SELECTION)
    if not Response.objects.filter(task__in=tasks).exists():
        return "D_selection has no tasks with responses: assign splits first (Splits page)."
    scored = Score.objects.filter(response__task__in=tasks, provider__in=LABEL_SCORES)
    preferred = Preference.objects.filter(
        task__in=tasks, is_current=True, provider="human", dimension__isnull=True
    )
    if not (scored.exists() or preferred.exists()):
        return (
            "D_selection has no expert scores or overall human preferences to rank candidates "
            "against: label some of its pairs first."
        )
    return None


def _labeled_task_count(tasks: list[int]) -> int:
    """How many of these tasks have expert scores or overall human preferences."""
    scored = (
        Score.objects.filter(response__task_id__in=tasks, provider__in=LABEL_SCORES)
        .values_list("response__task_id", flat=True)
        .distinct()
    )
    preferred = (
        Preference.objects.filter(
            task_id__in=tasks, is_current=True, provider="human", dimension__isnull=True
        )
        .values_list("task_id", flat=True)
        .distinct()
    )
    return len(set(scored) | set(preferred))


@transaction.atomic
def search_start(
    *,
    project: Project,
    kind: str,
    mode: str,
    endpoint: JudgeEndpoint,
    proposer: JudgeEndpoint | None = None,
    n: int,
    iterations: int = 0,
    k: int = 3,
    seed: int = 0,
    selection_rule: str | None = None,
    max_calls: int | None = None,
    max_cost: float | None = None,
    user: Any = None,
    warm_start: Metagrader | None = None,
    warm_start_note: str = "",
) -> SearchRun:
    """Check a search's settings and enqueue it when this commits. Raises SearchInvalid
    with a message a person can act on.

    `selection_rule` None is the default rule, or argmax while D_selection has too few labeled
    tasks to hold any back: a project with one labeled task must still be able to search, or
    active learning has no candidates to ask experts about. The search stores the rule it uses
    and, when it fell back, why. A split rule chosen explicitly is refused instead.

    `warm_start` makes it a re-search (graders/research.py): that grader competes in round 0
    and parents the round's proposals, which are then n - 1 beside it."""
    if kind not in KINDS:
        raise SearchInvalid(f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    if mode not in SearchMode.values:
        raise SearchInvalid(f"unknown mode {mode!r}; use one of {', '.join(SearchMode.values)}")
    if any(e is not None and e.project_id != project.pk for e in (endpoint, proposer)):
        raise SearchInvalid("the judge and the proposer must belong to this project")
    if warm_start is not None and (warm_start.project_id != project.pk or warm_start.kind != kind):
        raise SearchInvalid(f"a warm start must be a {kind} grader of this project")
    if mode == SearchMode.BEST_OF_N:
        iterations = 0
    elif iterations < 1:
        raise SearchInvalid("an evolutionary search needs at least one iteration")
    if n < 1 or k < 1:
        raise SearchInvalid("N and k must be at least 1")
    if 1 + n + iterations * k > MAX_CANDIDATES:
        raise SearchInvalid(
            f"that is {1 + n + iterations * k} candidates; at most {MAX_CANDIDATES} per search"
        )
    if selection_rule is not None and selection_rule not in SelectionRuleChoice.values:
        raise SearchInvalid(
            f"unknown selection rule {selection_rule!r}; use one of "
            f"{', '.join(SelectionRuleChoice.values)}"
        )
    problem = selection_problem(project)
    if problem:
        raise SearchInvalid(problem)
    rule = SelectionRule(selection_rule) if selection_rule is not None else DEFAULT_RULE
    selection_note = ""
    if rule.splits and _labeled_task_count(_graded_tasks(project, Split.SELECTION)) < 2:
        if selection_rule is not None:
            raise SearchInvalid(
                "that selection rule splits D_selection in two and needs at least two labeled "
                "D_selection tasks; label another task or pick a rule without a split"
            )
        rule, selection_note = SelectionRule.ARGMAX, TOO_FEW_TO_SPLIT
    job = job_create(
        kind=SEARCH_JOB, project=project, user=user, params={"kind": kind, "mode": mode}
    )
    search = SearchRun.objects.create(
        project=project,
        job=job,
        kind=kind,
        mode=mode,
        endpoint=endpoint,
        proposer=proposer,
        n=n,
        iterations=iterations,
        k=k,
        seed=seed,
        selection_rule=rule.value,
        selection_note=selection_note,
        max_calls=max_calls,
        max_cost=max_cost,
        snapshot=label_snapshot_take(project=project),
        warm_start=warm_start,
        warm_start_note=warm_start_note,
    )
    from graders.tasks import search_run_task

    search_run_task.delay_on_commit(search.pk)
    return search


def search_resume(
    *, search: SearchRun, max_calls: int | None = None, max_cost: float | None = None
) -> None:
    """Queue a stopped search again, optionally with a larger budget; nothing done is lost."""
    from graders.tasks import search_run_task

    with transaction.atomic():
        SearchRun.objects.filter(pk=search.pk).update(
            max_calls=max_calls if max_calls is not None else search.max_calls,
            max_cost=max_cost if max_cost is not None else search.max_cost,
        )
        Job.objects.filter(pk=search.job_id).exclude(status__in=Job.ACTIVE).update(
            status=JobStatus.QUEUED, cancel_requested=False, error="", finished_at=None
        )
        search_run_task.delay_on_commit(search.pk)


@transaction.atomic
def candidate_eval_start(*, candidate: Candidate, user: Any = None) -> GradingRun:
    """Grade a candidate on D_eval with its search's judge, on request. Only once the search
    has stopped: while it runs, it sets its best candidate's eval run itself."""
    search = candidate.search
    if search.job.is_active:
        raise SearchInvalid("wait for the search to stop: it evaluates its best so far itself")
    if candidate.metagrader is None:
        raise SearchInvalid("a rejected proposal has no program to evaluate")
    try:
        run = grading_run_start(
            project=search.project,
            metagrader=candidate.metagrader,
            endpoint=search.endpoint,
            split=Split.EVAL,
            user=user,
        )
    except RunInvalid as exc:
        raise SearchInvalid(
            f"cannot evaluate on D_eval: {exc}; assign an eval split first"
        ) from exc
    Candidate.objects.filter(pk=candidate.pk).update(eval_run=run)
    return run


def search_run_execute(*, search_id: int) -> dict[str, Any]:
    """Run or resume a search (labeling.jobs.job_run_leased: safe to call any number of
    times)."""
    search = SearchRun.objects.select_related("job", "project").get(pk=search_id)

    def work(job: Job, heartbeat: JobHeartbeat) -> dict[str, Any]:
        # This worker holds the lease, so tasks still marked running were left by a dead one.
        GradingItem.objects.filter(run__search=search, status=ItemStatus.RUNNING).update(
            status=ItemStatus.PENDING, claimed_at=None
        )
        try:
            return _SearchPass(search, job, heartbeat).run()
        except BudgetSpent:
            raise BudgetSpent(budget_spent_text(search_usage(search))) from None

    outcome = job_run_leased(
        job_id=search.job_id,
        work=work,
        resend=job_resend("graders.tasks.search_run_task", search_id),
        cancelled="Cancelled; the candidates graded so far are kept. Resume to go on.",
    )
    return {"search": search_id, **outcome}


def search_judge_usage(search: SearchRun) -> dict[str, float]:
    """What a search's grading runs spent on the judge, as stored while it is spent (so a crash
    loses none of it from the budget)."""
    totals: dict[str, float] = {}
    for usage in GradingRun.objects.filter(search=search).values_list("usage", flat=True):
        for key, value in usage.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def search_usage(search: SearchRun) -> dict[str, float]:
    """All a search spent, the budget's measure: its proposer's calls and its judge calls."""
    totals: dict[str, float] = dict(search.usage)
    for key, value in search_judge_usage(search).items():
        totals[key] = totals.get(key, 0) + value
    return totals


def metric_value(evaluation: dict[str, Any], key: str = "tolerant_ranking_accuracy") -> Any:
    metric = evaluation.get(key)
    return metric["value"] if metric else None


class _SearchPass:
    """One worker's pass over a search, from wherever the stored state says it is."""

    def __init__(self, search: SearchRun, job: Job, heartbeat: JobHeartbeat) -> None:
        self.search, self.job, self.heartbeat = search, job, heartbeat
        self.selection_tasks = _graded_tasks(search.project, Split.SELECTION)
        self.eval_tasks = _graded_tasks(search.project, Split.EVAL)
        self.budget: Budget = run_budget(search.max_calls, search.max_cost, search_usage(search))
        self.stage = ""

    def run(self) -> dict[str, Any]:
        search = self.search
        rounds = 1 + search.iterations
        winner: Candidate | None = None
        for iteration in range(rounds):
            self.stage = f"Round {iteration + 1} of {rounds}: proposing"
            self.progress()
            candidates = round_propose(search, iteration, self.budget, self.proposer_usage_add)
            for number, candidate in enumerate(candidates, 1):
                if candidate.status == CandidateStatus.PROPOSED:
                    self.stage = (
                        f"Round {iteration + 1} of {rounds}: grading candidate {number} of "
                        f"{len(candidates)} on D_selection"
                    )
                    self.candidate_grade(candidate)
            self.stage = f"Round {iteration + 1} of {rounds}: best so far on D_eval"
            winner = self.curve_extend(iteration)
            # The round's candidates change which labels would decide between them.
            queue_refresh_soon(search.project)
        candidates = list(Candidate.objects.filter(search=search))
        SearchRun.objects.filter(pk=search.pk).update(winner=winner)
        self.stage = "Done"
        self.progress()
        return {
            "winner": winner.pk if winner else None,
            "candidates": len(candidates),
            "graded": sum(c.status == CandidateStatus.GRADED for c in candidates),
        }

    # Progress -------------------------------------------------------------------------------

    def progress(self) -> None:
        """Report task gradings done of those planned, and stop on cancel or a lost lease."""
        self.heartbeat.check()
        search = self.search
        # One query for the rounds proposed so far and their candidates that will be graded.
        proposed: dict[int, int] = {}
        for iteration, status in Candidate.objects.filter(search=search).values_list(
            "iteration", "status"
        ):
            proposed[iteration] = proposed.get(iteration, 0) + (status != CandidateStatus.REJECTED)
        planned = sum(proposed.values()) + sum(
            search.n + 1 if i == 0 else search.k
            for i in range(1 + search.iterations)
            if i not in proposed
        )
        eval_runs = GradingRun.objects.filter(search=search, split=Split.EVAL).count()
        total = planned * len(self.selection_tasks) + max(1, eval_runs) * len(self.eval_tasks)
        done = GradingItem.objects.filter(run__search=search, status=ItemStatus.DONE).count()
        job_progress(job=self.job, stage=self.stage, done=min(done, total), total=total)
        cost = search_usage(search).get("cost", 0.0)
        Job.objects.filter(pk=self.job.pk).update(cost=round(cost, 6))

    def proposer_usage_add(self, usage: Usage) -> None:
        """The proposer's spending is the search's own; grading spends through its runs."""
        totals = dict(self.search.usage)
        for key, value in usage.as_dict().items():
            totals[key] = totals.get(key, 0) + value
        SearchRun.objects.filter(pk=self.search.pk).update(usage=totals)
        self.search.usage = totals

    # Grading --------------------------------------------------------------------------------

    def grade(self, run: GradingRun) -> None:
        """Grade a run of this search to the end (or raise), then evaluate it."""
        if run_complete(run) and run.job.status == JobStatus.SUCCEEDED:
            return
        Job.objects.filter(pk=run.job_id).update(status=JobStatus.RUNNING)
        Job.objects.filter(pk=run.job_id, started_at__isnull=True).update(
            started_at=self.job.started_at
        )

        def progress(done: int, total: int) -> None:
            Job.objects.filter(pk=run.job_id).update(stage="Grading tasks", done=done, total=total)
            self.progress()

        try:
            _, spent = run_grade(run, budget=self.budget, progress=progress)
        except (JobCancelled, LeaseLost):
            Job.objects.filter(pk=run.job_id).update(status=JobStatus.CANCELLED)
            raise
        if spent:
            job_budget_stop(job=run.job, usage=run.usage)
            raise BudgetSpent
        if not run_complete(run):  # only this worker grades a search's runs
            raise RuntimeError(f"grading run {run.pk} still has unfinished tasks")
        run_finish(run)

    def run_create(self, candidate: Candidate, split: str, tasks: list[int]) -> GradingRun:
        search = self.search
        job = job_create(
            kind=GRADING_JOB,
            project=search.project,
            params={"metagrader": candidate.metagrader_id, "search": search.pk, "split": split},
        )
        run = GradingRun.objects.create(
            project=search.project,
            metagrader_id=candidate.metagrader_id,
            endpoint_id=search.endpoint_id,
            split=split,
            job=job,
            search=search,
        )
        GradingItem.objects.bulk_create([GradingItem(run=run, task_id=pk) for pk in tasks])
        return run

    def candidate_grade(self, candidate: Candidate) -> None:
        if candidate.selection_run is None:
            with transaction.atomic():
                candidate.selection_run = self.run_create(
                    candidate, Split.SELECTION, self.selection_tasks
                )
                candidate.save(update_fields=["selection_run"])
        run = GradingRun.objects.select_related("metagrader", "endpoint", "job").get(
            pk=candidate.selection_run_id
        )
        self.grade(run)
        graded = run.evaluation.get("graded") or 0
        requests = (run.usage.get("calls", 0) - run.usage.get("retries", 0)) + run.usage.get(
            "cache_hits", 0
        )
        candidate.score = metric_value(run.evaluation)
        candidate.calls_per_response = requests / graded if graded else None
        candidate.status = CandidateStatus.GRADED
        candidate.save(update_fields=["score", "calls_per_response", "status"])

    def curve_extend(self, iteration: int) -> Candidate | None:
        """Apply the selection rule to the candidates of rounds up to `iteration`, store what
        it tells the proposer and ranks by, and grade the best on D_eval if it is not yet.
        The best of the last round is the search's winner."""
        candidates = list(
            Candidate.objects.filter(search=self.search, iteration__lte=iteration).select_related(
                "metagrader", "selection_run", "eval_run"
            )
        )
        chosen = candidates_select(self.search, candidates)
        if chosen is None:
            return None
        _selection_store(chosen)
        best = chosen.winner
        eval_accuracy: Any = None
        eval_ci: Any = None
        if self.eval_tasks:
            if best.eval_run is None or best.eval_run.search_id != self.search.pk:
                with transaction.atomic():
                    best.eval_run = self.run_create(best, Split.EVAL, self.eval_tasks)
                    best.save(update_fields=["eval_run"])
            run = GradingRun.objects.select_related("metagrader", "endpoint", "job").get(
                pk=best.eval_run_id
            )
            self.grade(run)
            metric = run.evaluation.get("tolerant_ranking_accuracy")
            if metric:
                eval_accuracy, eval_ci = metric["value"], metric["ci"]
        point = {
            "iteration": iteration,
            "candidate": best.pk,
            "name": best.metagrader.name if best.metagrader else "",
            **_selection_side(chosen),
            "eval": eval_accuracy,
            "eval_ci": eval_ci,
            "candidates": sum(c.status == CandidateStatus.GRADED for c in candidates),
        }
        curve = [p for p in self.search.curve if p["iteration"] < iteration] + [point]
        SearchRun.objects.filter(pk=self.search.pk).update(curve=curve)
        self.search.curve = curve
        return best


def _selection_store(chosen: CandidateSelection) -> None:
    """Each candidate's feedback and pick values, as the rule gave them."""
    selection = chosen.selection
    for index, candidate in enumerate(chosen.candidates):
        candidate.feedback_score = float(selection.feedback[index])
        pick = float(selection.pick[index])
        candidate.pick_score = None if np.isnan(pick) else pick
    Candidate.objects.bulk_update(chosen.candidates, ["feedback_score", "pick_score"])


def _selection_side(chosen: CandidateSelection) -> dict[str, Any]:
    """The best candidate's curve values on D_selection: what the proposer was told, with its
    interval, and for a rule with a split the untouched part's accuracy and interval too.
    Thresholdout's answers are noisy releases, not estimates, so they carry no interval."""
    best, selection = chosen.winner, chosen.selection
    index = selection.winner
    if selection.untouched is None or selection.untouched_tasks is None:
        assert best.selection_run is not None
        metric = best.selection_run.evaluation.get("tolerant_ranking_accuracy") or {}
        return {"selection": metric.get("value"), "selection_ci": metric.get("ci")}
    held = selection.untouched_tasks
    credit, pairs = chosen.inputs.credit[index], chosen.inputs.pairs
    feedback_ci = (
        _part_ci(credit[~held], pairs[~held]) if selection.rule == SelectionRule.HOLDOUT else None
    )
    return {
        "selection": float(selection.feedback[index]),
        "selection_ci": feedback_ci,
        "untouched": float(selection.untouched[index]),
        "untouched_ci": _part_ci(credit[held], pairs[held]),
    }


def _part_ci(credit: FloatArray, pairs: FloatArray) -> list[float] | None:
    """A part's task-bootstrap interval; none over a single task (see graders/evaluation)."""
    if pairs.size < 2:
        return None
    ci = task_bootstrap_ci(credit, pairs)
    return [ci.low, ci.high]
