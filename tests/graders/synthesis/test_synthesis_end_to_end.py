"""A synthesis end to end on real Celery workers and a real broker, against the scripted fake
OpenAI server (tests/graders/synthesis/scripted.py): its agents answer at the level their
steering names, its filter judges err on a hashed, scripted share of pairs.

The expected funnel is worked out here from the script alone (which judge errs on which pair,
so which draws are vetoed by whom, retried and kept; which slot shows the better response, read
from the requests the server received) and compared with `synthesis_funnel --json` whole. The
first run loses its worker to SIGKILL halfway, with the server holding every new request so
nothing is half-answered at the kill; the replacement finishes it, and the server must have been
asked once per rollout and once per vote. The second run rolls out through a webhook, one job
of which always fails."""

import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from io import StringIO
from math import comb
from typing import Any

import pytest
from django.core.management import call_command

from graders.engine.judge import ChatRequest
from graders.models import JudgeCall, JudgeEndpoint, SynthesisRun
from graders.synthesis.runs import synthesis_start
from labeling.models import (
    DrawOutcome,
    Job,
    JobStatus,
    Project,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
)
from tests.conftest import CeleryWorkers, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.synthesis.helpers import fenced, slots
from tests.graders.synthesis.hook import Hook
from tests.graders.synthesis.scripted import Script, start_arguments, synthesis_project

pytestmark = pytest.mark.worker
LEASE = "3"
JUDGES = ("judge-1", "judge-2")
RETRIES = 2
TASKS = tuple(f"t{n}" for n in range(1, 17))  # 16 tasks x 2 dimensions = 32 cells
BAD_STEERING = "t16"  # both its cells fail at the steering writer, before any draw
ERR_SHARE = 0.3
QUALITY = re.compile(r"quality=(\d) task=(t\d+)")
STEERED = re.compile(r"STEER-(\w+) for (t\d+) on (\w+)")  # the script's steering, by level


# The script's outcome, worked out without the product ---------------------------------------


@dataclass(frozen=True)
class Planned:
    """A cell as the run planned it (its strata), read from its row."""

    key: str
    task: str
    dimension: str
    domain: str
    contrast: str
    agent: str


def draws_implied(script: Script, task: str, dimension: str) -> list[list[tuple[str, bool]]]:
    """The (judge, agrees) votes of each draw of a cell, in retry order: judges in cascade
    order until one errs (a veto), then the next retry; a draw all agree with ends the cell.
    Each judge's n-th pair of the cell is its n-th vote on it (nothing is asked twice)."""
    draws: list[list[tuple[str, bool]]] = []
    sights: Counter[str] = Counter()
    for _ in range(RETRIES + 1):
        votes = []
        for judge in JUDGES:
            agrees = not script.errs(judge, task, dimension, sights[judge])
            sights[judge] += 1
            votes.append((judge, agrees))
            if not agrees:
                break
        draws.append(votes)
        if all(agrees for _, agrees in votes):
            break
    return draws


def votes_implied(
    cells: list[Planned], implied: dict[str, list[list[tuple[str, bool]]]]
) -> Counter[tuple[str, str, str]]:
    """How many pairs each judge is asked of each (task, dimension): one per vote."""
    votes: Counter[tuple[str, str, str]] = Counter()
    for c in cells:
        for draw in implied.get(c.key, []):
            votes.update((judge, c.task, c.dimension) for judge, _ in draw)
    return votes


def share(numerator: float, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def rejected(draws: Iterable[list[tuple[str, bool]]]) -> dict[str, int]:
    counts = dict.fromkeys(JUDGES, 0)
    for votes in draws:
        judge, agrees = votes[-1]
        counts[judge] += not agrees
    return counts


def two_sided_p(successes: int, trials: int) -> float:
    """Exact binomial test against 1/2: the mass of every outcome no likelier than this one."""
    here = comb(trials, successes)
    mass = sum(comb(trials, k) for k in range(trials + 1) if comb(trials, k) <= here)
    return float(min(Fraction(1), Fraction(mass, 2**trials)))


def funnel_expected(
    cells: list[Planned],
    outcomes: dict[str, list[list[tuple[str, bool]]]],
    failed: dict[str, tuple[int, ...]],
    slot_2: dict[str, list[tuple[str, bool]]],
    stages: dict[str, tuple[int, int | None]],
    cost: float,
) -> dict[str, Any]:
    """The synthesis_funnel --json document the script implies. `outcomes` holds every cell's
    judged draws; `failed` a cell's draws that ended failed (their retries); `slot_2` per cell,
    for each judge request the server received, the judge and whether the better response was
    shown second; `stages` the calls and tokens (None: unknown) of each stage."""

    def drawn(group: list[Planned]) -> list[tuple[int, list[tuple[str, bool]] | None]]:
        return [
            *((r, votes) for c in group for r, votes in enumerate(outcomes.get(c.key, []))),
            *((r, None) for c in group for r in failed.get(c.key, ())),
        ]

    def is_kept(votes: list[tuple[str, bool]] | None) -> bool:
        return votes is not None and all(agrees for _, agrees in votes)

    def retry_row(at: list[tuple[int, list[tuple[str, bool]] | None]], so_far: int) -> Any:
        judged = [votes for _, votes in at if votes is not None]
        kept = sum(map(is_kept, judged))
        return {
            "draws": len(at),
            "kept": kept,
            "rejected": rejected(v for v in judged if not is_kept(v)),
            "failed": len(at) - len(judged),
            "pending": 0,
            "retention": share(kept, len(at)),
            "cumulative_retention": share(so_far, len(cells)),
        }

    every = drawn(cells)
    by_retry, so_far = [], 0
    for retry in range(RETRIES + 1):
        at = [d for d in every if d[0] == retry]
        so_far += sum(is_kept(votes) for _, votes in at)
        by_retry.append({"retry": retry, **retry_row(at, so_far)})
    kept = sum(is_kept(votes) for _, votes in every)

    def subsets(axis: str) -> list[dict[str, Any]]:
        rows = []
        for value in sorted({getattr(c, axis) for c in cells}):
            group = [c for c in cells if getattr(c, axis) == value]
            draws = drawn(group)
            filled = sum(is_kept(votes) for _, votes in draws)
            rows.append(
                {
                    "value": value,
                    "cells": len(group),
                    "filled": filled,
                    "draws": len(draws),
                    "rejected": rejected(v for _, v in draws if v is not None and not is_kept(v)),
                    "retention": share(filled, len(draws)),
                    "cumulative_retention": share(filled, len(group)),
                    "draws_per_kept": share(len(draws), filled),
                }
            )
        return rows

    def position(axis: str, value: str, shown: list[bool]) -> dict[str, Any]:
        second = sum(shown)
        return {
            "axis": axis,
            "value": value,
            "votes": len(shown),
            "better_in_slot_2": second,
            "share": share(second, len(shown)),
            "p_value": two_sided_p(second, len(shown)),
        }

    audit = [position("all", "all", [s for c in cells for _, s in slot_2.get(c.key, [])])]
    audit += [
        position("judge", judge, [s for c in cells for j, s in slot_2.get(c.key, []) if j == judge])
        for judge in JUDGES
    ]
    for axis in ("dimension", "domain", "contrast", "agent"):
        for value in sorted({getattr(c, axis) for c in cells}):
            group = [c for c in cells if getattr(c, axis) == value]
            shown = [s for c in group for _, s in slot_2.get(c.key, [])]
            if shown:
                audit.append(position(axis, value, shown))
    return {
        "note": None,  # only the demo's synthesis carries one
        "judges": list(JUDGES),
        "retries": RETRIES,
        "cells": len(cells),
        "draws": len(every),
        "kept": kept,
        "by_retry": by_retry,
        "total": retry_row(every, kept),
        "by": {axis: subsets(axis) for axis in ("dimension", "domain", "contrast", "agent")},
        "cost": cost,
        "cost_per_kept": share(cost, kept),
        "stages": [
            {
                "stage": stage,
                "calls": calls,
                "tokens": tokens,
                "calls_per_kept": share(calls, kept),
                "tokens_per_kept": None if tokens is None else share(tokens, kept),
            }
            for stage, (calls, tokens) in sorted(stages.items())
        ],
        "position": audit,
    }


# What the run stored and what the server received --------------------------------------------


def planned(run: SynthesisRun) -> list[Planned]:
    cells = SynthesisCell.objects.filter(synthesis=run.synthesis).select_related("task")
    return [
        Planned(
            c.external_id,
            c.task.external_id,
            c.dimension.name,
            c.task.domain,
            c.contrast,
            c.agent,
        )
        for c in cells.select_related("dimension")
    ]


def funnel_json(project: Project, run: SynthesisRun) -> dict[str, Any]:
    out = StringIO()
    call_command("synthesis_funnel", project=project.slug, json=True, stdout=out)
    report: dict[str, Any] = json.loads(out.getvalue())
    assert report.pop("synthesis") == run.synthesis.external_id
    return report


def prompt(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body["messages"])


def judge_requests(server: FakeJudgeServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if "Compare two responses" in prompt(r.body)]


def slots_seen(server: FakeJudgeServer, cells: list[Planned]) -> dict[str, list[tuple[str, bool]]]:
    """Per cell key: (judge, better response shown second) for each judge request received."""
    by_task = {(c.task, c.dimension): c.key for c in cells}
    seen: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for body in judge_requests(server):
        request = ChatRequest(tuple(body["messages"]))
        [(qa, task)], [(qb, _)] = (QUALITY.findall(text) for text in slots(request))
        seen[by_task[(task, fenced(request)[0])]].append((body["model"], int(qb) > int(qa)))
    return seen


def settled(run: SynthesisRun, quiet_s: float = 0.5) -> bool:
    """Wait until the run's rows stop changing for `quiet_s` (every answer it holds stored)."""

    def rows() -> tuple[int, ...]:
        cells = SynthesisCell.objects.filter(synthesis=run.synthesis)
        draws = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis)
        return (
            cells.exclude(steering={}).count(),
            cells.exclude(error="").count(),
            draws.exclude(outcome=DrawOutcome.PENDING).count(),
            draws.filter(low_response__isnull=False).count(),
            draws.filter(high_response__isnull=False).count(),
            SynthesisVote.objects.filter(draw__cell__synthesis=run.synthesis).count(),
        )

    seen = [rows()]

    def unchanged() -> bool:
        time.sleep(quiet_s)
        seen.append(rows())
        return seen[-1] == seen[-2]

    return wait_for(unchanged, timeout=20, interval=0)


def wait_finished(run: SynthesisRun, timeout: float = 120) -> Job:
    assert wait_for(lambda: Job.objects.get(pk=run.job_id).status not in Job.ACTIVE, timeout)
    return Job.objects.get(pk=run.job_id)


# The runs ----------------------------------------------------------------------------------


def test_a_run_killed_halfway_finishes_once_with_the_funnel_the_script_implies(
    celery_workers: CeleryWorkers, project: Project, fake_judge: FakeJudgeServer, settings: Any
) -> None:
    settings.JOB_LEASE_SECONDS = float(LEASE)
    script = Script(err_share=ERR_SHARE, bad_steering={BAD_STEERING})
    fake_judge.responder, fake_judge.latency_s = script, 0.02
    synthesis_project(project, fake_judge, TASKS)
    JudgeEndpoint.objects.filter(project=project).update(max_concurrency=4)
    run = synthesis_start(**start_arguments(project, retries=RETRIES))
    cells = planned(run)
    assert len(cells) == 32
    implied = {
        c.key: draws_implied(script, c.task, c.dimension) for c in cells if c.task != BAD_STEERING
    }
    # The script is not vacuous: a cell vetoed on retry 0 and kept on retry 1 (the forced
    # retry path), one vetoed on every retry, and rejections by both judges.
    retried = [k for k, d in implied.items() if len(d) == 2 and all(a for _, a in d[1])]
    assert retried and any(len(d) == 3 and not all(a for _, a in d[2]) for d in implied.values())
    assert all(rejected(d for ds in implied.values() for d in ds).values())

    first = celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE)
    draws = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis)
    assert wait_for(lambda: draws.exclude(outcome=DrawOutcome.PENDING).count() >= 12, 60)
    # Hold every new request, let what was answered be stored, then kill: the worker dies
    # waiting, with no answer it was sent left unstored.
    fake_judge.hold()
    assert wait_for(lambda: fake_judge.in_flight == 0 and fake_judge.held > 0, 20)
    assert wait_for(lambda: JudgeCall.objects.count() == fake_judge.call_count, 20)
    assert settled(run)
    owner = Job.objects.get(pk=run.job_id).owner
    celery_workers.kill(first)
    # The one answer a cell does not store is an unusable steering answer whose re-ask was
    # held at the kill: only such answers may come from the judge cache on the resume;
    # everything else was stored and is not asked again at all, not even of the cache.
    unusable = sum(a.stage == "steer" and a.task == BAD_STEERING for a in script.answered)
    halfway = (
        unusable
        - 2 * SynthesisCell.objects.filter(synthesis=run.synthesis).exclude(error="").count()
    )
    ended, asked = draws.exclude(outcome=DrawOutcome.PENDING).count(), fake_judge.call_count
    assert ended < sum(map(len, implied.values())), "the kill came too late"
    fake_judge.release()
    celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE)
    job = wait_finished(run)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.owner != owner and job.done == job.total == 32
    assert fake_judge.call_count > asked  # the second worker did the rest
    run.refresh_from_db()
    assert run.usage["cache_hits"] == halfway

    # What the server was asked: each cell's steering once (the unusable one re-asked once),
    # each (cell, retry) its two rollouts once, each vote once: nothing twice across the kill.
    bodies = [r.body for r in fake_judge.requests]
    assert max(Counter(json.dumps(b, sort_keys=True) for b in bodies).values()) == 1
    writer = Counter(b["model"] for b in bodies if "three system-prompt" in prompt(b))
    assert writer == {"writer": 30 + 2 * 2}
    rollouts = Counter(
        mark
        for b in bodies
        if b["model"].startswith("agent-")
        for mark in STEERED.findall(prompt(b))
    )
    assert rollouts == {
        (level.upper(), c.task, c.dimension): len(implied[c.key])
        for c in cells
        if c.key in implied
        for level in c.contrast.split("-")
    }
    assert script.sights == votes_implied(cells, implied)
    assert len(bodies) == sum(writer.values()) + sum(rollouts.values()) + script.sights.total()

    # The forced retry path: vetoed on retry 0, kept on retry 1, the same steering, fresh
    # rollouts.
    cell = SynthesisCell.objects.get(synthesis=run.synthesis, external_id=retried[0])
    zero, one = cell.draws.order_by("retry")
    assert (zero.outcome, one.outcome) == (DrawOutcome.VETOED, DrawOutcome.KEPT)
    assert [(v.judge, v.agrees) for v in zero.votes.all()] == implied[cell.external_id][0]
    assert {zero.low_response_id, zero.high_response_id}.isdisjoint(
        {one.low_response_id, one.high_response_id}
    )
    failed_cells = SynthesisCell.objects.filter(synthesis=run.synthesis).exclude(error="")
    assert {c.task.external_id for c in failed_cells} == {BAD_STEERING}

    # Stages: what the server answered, but the failed cells' steering, which is on no draw.
    stages = script.stages(without={BAD_STEERING})
    expected = funnel_expected(cells, implied, {}, slots_seen(fake_judge, cells), stages, 0.0)
    assert funnel_json(project, run) == expected


WEBHOOK_TASKS = ("t1", "t2", "t3", "t4", "t5")  # 10 cells


def test_a_webhook_run_fails_its_one_failing_job_clearly_and_funnels_the_rest(
    celery_workers: CeleryWorkers,
    project: Project,
    fake_judge: FakeJudgeServer,
    hook: Hook,
    settings: Any,
) -> None:
    settings.JOB_LEASE_SECONDS = float(LEASE)
    script = Script(err_share=ERR_SHARE)
    fake_judge.responder = script
    synthesis_project(project, fake_judge, WEBHOOK_TASKS)
    run = synthesis_start(
        **start_arguments(project, retries=RETRIES, mode="webhook", webhook_url=hook.url)
    )
    cells = planned(run)
    # The failing job: one level of one cell, its first draw; the cell's other rollout works.
    failing = next(c for c in cells if c.task == "t2" and c.dimension == "clarity")
    low = failing.contrast.split("-")[0]
    hook.fails = lambda body: (body["cell"], body["level"]) == (failing.key, low)
    celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE)
    job = wait_finished(run)
    assert job.status == JobStatus.SUCCEEDED, job.error

    cell = SynthesisCell.objects.get(synthesis=run.synthesis, external_id=failing.key)
    assert cell.error == (
        f"rollout {low} (retry 0): rollout webhook, job {failing.key} {low} attempt 0: "
        "gave up after 3 attempts; last: HTTP 500"
    )
    [draw] = cell.draws.all()
    assert draw.outcome == DrawOutcome.FAILED and draw.error == cell.error
    # Its other rollout stays held on the draw: a response is made only with its pair.
    assert draw.low_response_id is None and draw.high_response_id is None
    assert list(draw.held) == [failing.contrast.split("-")[1]]

    implied = {c.key: draws_implied(script, c.task, c.dimension) for c in cells if c != failing}
    # Each job posted once (the failing one three times: two retries), each vote asked once.
    posted = Counter((b["cell"], b["level"], b["attempt"]) for b in hook.bodies)
    assert posted == {
        **{
            (c.key, level, retry): 1
            for c in cells
            if c != failing
            for retry in range(len(implied[c.key]))
            for level in c.contrast.split("-")
        },
        (failing.key, low, 0): 3,
        (failing.key, failing.contrast.split("-")[1], 0): 1,
    }
    assert script.sights == votes_implied(cells, implied)

    rollouts = 2 * sum(map(len, implied.values())) + 1  # the failing draw's other rollout
    # The webhook reports no tokens: its stage's calls are the rollouts it returned.
    stages: dict[str, tuple[int, int | None]] = {**script.stages(), "rollout": (rollouts, None)}
    seen = slots_seen(fake_judge, cells)
    expected = funnel_expected(cells, implied, {failing.key: (0,)}, seen, stages, 0.5 * rollouts)
    assert funnel_json(project, run) == expected
