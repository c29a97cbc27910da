"""Running an evaluator sweep (graders/synthesis/sweep.py starts it).

Idempotency and resumption: one worker runs a sweep at a time (labeling.jobs.job_run_leased);
a unit of work is (evaluator, response, dimension, run), done exactly when its JudgeScore row
exists (the table's unique constraint holds it to one), so a pass scores only what has no row
yet, and deterministic judge answers sit in the judge cache besides. The run index is the
request's seed: the n runs are n requests, not one answer read n times. Every unit of a pass is
in flight at once behind one client per endpoint (its concurrency limit holds across the
evaluators on it), and each score is stored as it lands, so a straggler holds up no other."""

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from graders.engine.judge import (
    Budget,
    BudgetExhausted,
    CallsStopped,
    JudgeClient,
    JudgeSettings,
    Usage,
)
from graders.engine.programs import (
    DocumentInput,
    Judge,
    Program,
    ResponseInput,
    TaskInput,
    grade_scalar,
    program_validate,
)
from graders.engine.synthesis.evaluator import (
    DimensionInput,
    SeededJudge,
    evaluator_answer_read,
    evaluator_request,
    score_in_range,
    without_system_turns,
)
from graders.grading import run_budget
from graders.judge_cache import DatabaseJudgeCache
from graders.models import JudgeEndpoint, Metagrader, SynthesisSweep
from graders.services import endpoint_settings
from graders.synthesis.progress import time_left
from graders.synthesis.sweep import SweepInvalid, kept_pairs
from labeling.jobs import (
    BudgetSpent,
    JobCancelled,
    JobHeartbeat,
    budget_spent_text,
    job_cancel_requested,
    job_resend,
    job_run_leased,
)
from labeling.models import Dimension, Job, JudgeScore, Response, Task

STAGE = "Scoring responses"
REPORT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Unit:
    """One score to produce: evaluator (index into the sweep's list), response, dimension, run."""

    evaluator: int
    response: int
    dimension: int
    run: int


@dataclass(frozen=True)
class Material:
    """What the evaluators read, by primary key (responses, their tasks, the dimensions)."""

    responses: dict[int, ResponseInput]
    task_of: dict[int, int]
    tasks: dict[int, TaskInput]
    dimensions: dict[int, DimensionInput]


def sweep_units(sweep: SynthesisSweep) -> tuple[list[Unit], int]:
    """The units not scored yet, by run, then response, then evaluator (so every evaluator's
    first run comes first), and the number of all."""
    names = [e["name"] for e in sweep.evaluators]
    sides = _sweep_responses(sweep)
    scored = set(
        JudgeScore.objects.filter(
            judge__in=names, response__in=list(sides), run__lt=sweep.runs
        ).values_list("judge", "response_id", "dimension_id", "run")
    )
    every = [
        Unit(index, response, dimension, run)
        for run in range(sweep.runs)
        for response, dimension in sides.items()
        for index in range(len(names))
    ]
    pending = [
        u for u in every if (names[u.evaluator], u.response, u.dimension, u.run) not in scored
    ]
    return pending, len(every)


def _sweep_responses(sweep: SynthesisSweep) -> dict[int, int]:
    """Response -> the dimension it is scored on, for both sides of every kept pair."""
    sides: dict[int, int] = {}
    for low, high, dimension, _ in kept_pairs(sweep.synthesis):
        sides[low] = sides[high] = dimension
    return sides


def _material_load(units: Sequence[Unit]) -> Material:
    response_pks = {u.response for u in units}
    rows = Response.objects.filter(pk__in=response_pks).only(
        "external_id", "content", "messages", "task_id"
    )
    responses, task_of = {}, {}
    for r in rows:
        messages = None if r.messages is None else tuple(r.messages)
        responses[r.pk] = ResponseInput(r.external_id, r.content, messages)
        task_of[r.pk] = r.task_id
    tasks = {
        t.pk: TaskInput(
            t.external_id,
            t.prompt,
            t.instructions,
            tuple(DocumentInput(d.external_id, d.title, d.text) for d in t.documents.all()),
        )
        for t in Task.objects.filter(pk__in=set(task_of.values())).prefetch_related("documents")
    }
    dimensions = {
        d.pk: DimensionInput(d.name, d.description)
        for d in Dimension.objects.filter(pk__in={u.dimension for u in units})
    }
    return Material(responses, task_of, tasks, dimensions)


class _LoopSharingCache(DatabaseJudgeCache):
    """One endpoint's judge cache whose database work goes through another cache's run() loop,
    so a single pass serves the caches of every endpoint it calls from one thread."""

    def __init__(self, endpoint: JudgeEndpoint, loop_owner: DatabaseJudgeCache) -> None:
        super().__init__(endpoint)
        self.loop_owner = loop_owner

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        return self.loop_owner.call(function, *args)


@dataclass
class _PassState:
    """What a pass has done so far, read and written on the database thread."""

    done: int
    total: int
    started: float
    scored_now: int = 0
    reported: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)  # evaluator name -> failed units
    examples: dict[str, str] = field(default_factory=dict)  # evaluator name -> first reason


class _SweepPass:
    """One worker's pass over the units a sweep has left."""

    def __init__(self, sweep: SynthesisSweep, job: Job, heartbeat: JobHeartbeat) -> None:
        self.sweep, self.job, self.heartbeat = sweep, job, heartbeat
        self.budget: Budget = run_budget(sweep.max_calls, sweep.max_cost, sweep.usage)
        self.endpoints = JudgeEndpoint.objects.in_bulk({e["endpoint"] for e in sweep.evaluators})
        self.programs = {
            g.pk: program_validate(g.program)
            for g in Metagrader.objects.filter(
                pk__in={e["metagrader"] for e in sweep.evaluators if e["metagrader"]}
            )
        }
        gone = [e["name"] for e in sweep.evaluators if e["endpoint"] not in self.endpoints]
        gone += [
            e["name"]
            for e in sweep.evaluators
            if e["metagrader"] is not None and e["metagrader"] not in self.programs
        ]
        if gone:
            raise SweepInvalid(f"evaluators deleted since the sweep started: {', '.join(gone)}")
        self.usage_stored = Usage()
        self.usages: list[Usage] = []
        self.cancelled = False

    def run(self) -> dict[str, Any]:
        units, total = sweep_units(self.sweep)
        state = _PassState(done=total - len(units), total=total, started=time.monotonic())
        self._progress(state, force=True)
        if units:
            material = _material_load(units)
            settings = {pk: endpoint_settings(e) for pk, e in self.endpoints.items()}
            owner_pk, *others = sorted(self.endpoints)
            owner = DatabaseJudgeCache(self.endpoints[owner_pk])
            caches = {owner_pk: owner} | {
                pk: _LoopSharingCache(self.endpoints[pk], owner) for pk in others
            }
            outcome = owner.run(self._score_all(units, material, settings, caches, state, owner))
            self._usage_store()
            self._progress(state, force=True)
            self.heartbeat.check()
            if outcome == "cancelled":
                raise JobCancelled
            if outcome == "budget":
                self.sweep.refresh_from_db(fields=["usage"])
                raise BudgetSpent(budget_spent_text(self.sweep.usage))
        return {
            "units": state.total,
            "scored_now": state.scored_now,
            "failed_now": state.failures,
            "failure_examples": state.examples,
        }

    async def _score_all(
        self,
        units: Sequence[Unit],
        material: Material,
        settings: dict[int, JudgeSettings],
        caches: dict[int, DatabaseJudgeCache],
        state: _PassState,
        owner: DatabaseJudgeCache,
    ) -> str:
        """Score every unit concurrently, one client per endpoint (its concurrency limit holds
        across the evaluators on it); each score is stored as it lands."""

        def stop() -> bool:
            self.cancelled = self.cancelled or bool(
                owner.call(lambda: job_cancel_requested(job=self.job) or self.heartbeat.lost)
            )
            return self.cancelled

        clients = {
            pk: JudgeClient(settings[pk], cache=caches[pk], budget=self.budget, stop=stop)
            for pk in settings
        }
        self.usages = [client.usage for client in clients.values()]
        # Units wait here, before their prompt is built, so a sweep of thousands holds only a
        # few prompts per endpoint in memory; twice the client's limit keeps it busy.
        slots = {pk: asyncio.Semaphore(2 * settings[pk].max_concurrency) for pk in settings}
        try:
            results = await asyncio.gather(
                *(self._unit_score(u, material, clients, slots, state, owner) for u in units),
                return_exceptions=True,
            )
        finally:
            for client in clients.values():
                await client.aclose()
        errors = [r for r in results if isinstance(r, BaseException)]
        unexpected = [e for e in errors if not isinstance(e, BudgetExhausted | CallsStopped)]
        if unexpected:
            raise unexpected[0]
        if any(isinstance(e, CallsStopped) for e in errors):
            return "cancelled"
        return "budget" if errors else "done"

    async def _unit_score(
        self,
        unit: Unit,
        material: Material,
        clients: dict[int, JudgeClient],
        slots: dict[int, asyncio.Semaphore],
        state: _PassState,
        owner: DatabaseJudgeCache,
    ) -> None:
        evaluator = self.sweep.evaluators[unit.evaluator]
        async with slots[evaluator["endpoint"]]:
            score, error = await self._unit_evaluate(
                unit, evaluator, material, clients[evaluator["endpoint"]]
            )
        owner.call(self._store, unit, evaluator["name"], score, error, state)

    async def _unit_evaluate(
        self, unit: Unit, evaluator: dict[str, Any], material: Material, judge: Judge
    ) -> tuple[float | None, str | None]:
        """The unit's score, or None and why it failed."""
        response = material.responses[unit.response]
        task = material.tasks[material.task_of[unit.response]]
        if evaluator["metagrader"] is None:
            request = evaluator_request(
                dimension=material.dimensions[unit.dimension],
                request=task.prompt,
                documents=task.documents,
                response=response,
                run=unit.run,
            )
            answer = evaluator_answer_read(await judge.complete(request))
            return answer.score, answer.error
        program: Program = self.programs[evaluator["metagrader"]]
        grade = await grade_scalar(
            program, task, without_system_turns(response), SeededJudge(judge, unit.run)
        )
        score = score_in_range(grade.reward)
        if score is None:
            return None, grade.error or f"reward {grade.reward} is outside [0, 1]"
        return score, None

    def _store(
        self, unit: Unit, name: str, score: float | None, error: str | None, state: _PassState
    ) -> None:
        JudgeScore.objects.bulk_create(
            [
                JudgeScore(
                    judge=name,
                    response_id=unit.response,
                    dimension_id=unit.dimension,
                    run=unit.run,
                    score=score,
                )
            ],
            ignore_conflicts=True,  # a unit is done once; its row is never rewritten
        )
        state.done += 1
        state.scored_now += 1
        if score is None:
            state.failures[name] = state.failures.get(name, 0) + 1
            state.examples.setdefault(name, error or "failed")
        if time.monotonic() - state.reported >= REPORT_INTERVAL_S:
            self._usage_store()
            self._progress(state)

    def _progress(self, state: _PassState, force: bool = False) -> None:
        if not force and time.monotonic() - state.reported < REPORT_INTERVAL_S:
            return
        state.reported = time.monotonic()
        stage = f"{STAGE} · {state.done} of {state.total}"
        elapsed = time.monotonic() - state.started
        left = eta_text(state.scored_now, state.total - state.done, elapsed)
        if left:
            stage += f" · {left}"
        Job.objects.filter(pk=self.job.pk).update(stage=stage, done=state.done, total=state.total)

    def _usage_store(self) -> None:
        # The clients' counters move on the event loop's thread meanwhile: a snapshot may be a
        # call behind, and the store at the end of the pass adds the difference.
        current = Usage()
        for usage in self.usages:
            for key, value in usage.as_dict().items():
                setattr(current, key, getattr(current, key) + value)
        delta = {
            key: value - getattr(self.usage_stored, key) for key, value in current.as_dict().items()
        }
        self.usage_stored = current
        with transaction.atomic():
            locked = SynthesisSweep.objects.select_for_update().get(pk=self.sweep.pk)
            totals = dict(locked.usage)
            for key, value in delta.items():
                totals[key] = totals.get(key, 0) + value
            SynthesisSweep.objects.filter(pk=self.sweep.pk).update(usage=totals)
            Job.objects.filter(pk=self.job.pk).update(cost=round(totals.get("cost", 0.0), 6))


def eta_text(done_now: int, left: int, elapsed_s: float) -> str:
    """ "about 3 min left", from this pass's pace (units scored / seconds); "" before the
    first unit, or when nothing is left. A sweep counts minutes from 60 s and hours from 1 h."""
    return time_left(done_now, left, elapsed_s, minutes_from=60, hours_from=3600)


def sweep_execute(*, sweep_id: int) -> dict[str, Any]:
    """Run or resume a sweep (labeling.jobs.job_run_leased: safe to call any number of
    times)."""
    sweep = SynthesisSweep.objects.select_related("job", "synthesis").get(pk=sweep_id)

    outcome = job_run_leased(
        job_id=sweep.job_id,
        work=lambda job, heartbeat: _SweepPass(sweep, job, heartbeat).run(),
        resend=job_resend("graders.tasks.synthesis_sweep_task", sweep_id),
        cancelled="Cancelled; the scores so far are kept. Resume to go on.",
    )
    return {"sweep": sweep_id, **outcome}
