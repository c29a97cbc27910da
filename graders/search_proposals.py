"""Proposing a search round's candidates, once: from the strong model behind the search's
proposer endpoint when it has one, else from the structured proposer. A round's candidates
are stored in one transaction, so a worker that dies while proposing proposes the round again
(from the cache, for a deterministic proposer) and never half of it."""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from django.db import transaction

from graders.candidates import candidates_ranked
from graders.engine.baseline import baseline_program
from graders.engine.judge import Budget, BudgetExhausted, JudgeClient, Usage
from graders.engine.programs import Kind, program_validate
from graders.engine.proposer import program_fingerprint, propose
from graders.engine.proposer_llm import LlmProposal, PriorCandidate, llm_propose, material_render
from graders.judge_cache import DatabaseJudgeCache
from graders.models import Candidate, CandidateStatus, Metagrader, Origin, SearchRun
from graders.search_material import meta_material, prior_candidates
from graders.services import endpoint_settings, metagrader_register
from labeling.jobs import BudgetSpent

# The structured proposer breeds each round from the best few candidates so far, by feedback.
PARENTS_PER_ROUND = 3
# How much of the proposer's context the D_meta material may fill (about 4 characters a token).
MATERIAL_CHARS = 40_000
PROPOSER_PROMPT_CHARS = 90_000
WARM_START_LINEAGE = "the current grader (warm start)"


@dataclass(frozen=True)
class Slot:
    """A candidate about to be stored: a program, or why there is none."""

    program: dict[str, Any] | None
    lineage: str
    parent_hash: str | None = None
    prompt: str = ""
    raw: str = ""
    errors: tuple[str, ...] = ()
    rejected: str = ""


def round_propose(
    search: SearchRun, iteration: int, budget: Budget, usage_add: Callable[[Usage], None]
) -> list[Candidate]:
    """The round's candidates in order, proposing and storing them first if needed."""
    stored = _round_candidates(search, iteration)
    if stored:
        return stored
    kind = cast(Kind, search.kind)
    prior = list(
        Candidate.objects.filter(search=search, iteration__lt=iteration).select_related(
            "metagrader"
        )
    )
    seen = {c.fingerprint for c in prior if c.fingerprint}
    count = search.n if iteration == 0 else search.k
    slots: list[Slot] = []
    if iteration == 0:
        baseline = baseline_program(kind).to_json()
        slots.append(Slot(program=baseline, lineage="the baseline"))
        seen.add(program_fingerprint(baseline))
        if search.warm_start is not None:
            slots, count = _warm_slots(search.warm_start, slots, seen), count - 1
    warm = search.warm_start if iteration == 0 else None
    if count > 0 and search.proposer is None:
        slots += _structured_slots(search, kind, iteration, prior, count, seen, warm)
    elif count > 0:
        slots += _llm_slots(search, kind, count, seen, budget, usage_add, warm)
    _slots_store(search, iteration, slots)
    return _round_candidates(search, iteration)


def _warm_slots(warm: Metagrader, slots: list[Slot], seen: set[str]) -> list[Slot]:
    """Round 0's baseline slot and the current grader's beside it, so the old grader is graded
    on the new labels like any candidate (its metagrader is the old one: same content hash).
    When it grades exactly as the baseline does, it takes the baseline's slot instead, since a
    search grades each program once."""
    fingerprint = program_fingerprint(warm.program)
    if fingerprint in seen:
        lineage = f"{WARM_START_LINEAGE}, which grades as the baseline does"
        return [replace(slots[0], program=warm.program, lineage=lineage)]
    seen.add(fingerprint)
    return [*slots, Slot(program=warm.program, lineage=WARM_START_LINEAGE)]


def _round_candidates(search: SearchRun, iteration: int) -> list[Candidate]:
    return list(
        Candidate.objects.filter(search=search, iteration=iteration)
        .select_related("metagrader", "selection_run", "eval_run")
        .order_by("position")
    )


def _structured_slots(
    search: SearchRun,
    kind: Kind,
    iteration: int,
    prior: list[Candidate],
    count: int,
    seen: set[str],
    warm: Metagrader | None,
) -> list[Slot]:
    # Ranked by what the selection rule told the proposer (stored by the search after each
    # round), so under a rule with a split the untouched part never steers the breeding.
    # A re-search's round 0 breeds from the current grader.
    parents = (
        [warm.program]
        if warm is not None
        else [
            c.metagrader.program
            for c in candidates_ranked(prior, by="feedback_score")[:PARENTS_PER_ROUND]
            if c.metagrader is not None
        ]
    )
    # One seeded draw per round, so a round proposed again is the same round.
    proposals = propose(
        parents, kind=kind, n=count, seed=search.seed * 1_000_003 + iteration, history=seen
    )
    return [
        Slot(
            program=proposal.program,
            lineage=proposal.lineage,
            parent_hash=proposal.parents[0] if proposal.parents else None,
        )
        for proposal in proposals
    ]


def _llm_slots(
    search: SearchRun,
    kind: Kind,
    count: int,
    seen: set[str],
    budget: Budget,
    usage_add: Callable[[Usage], None],
    warm: Metagrader | None,
) -> list[Slot]:
    assert search.proposer is not None
    settings = endpoint_settings(search.proposer)
    material = material_render(meta_material(search.project), MATERIAL_CHARS)
    prior = prior_candidates(search)
    if warm is not None:  # round 0 of a re-search: shown the current grader as the one to beat
        prior.append(
            PriorCandidate(
                name=warm.name,
                program=warm.program,
                results="The grader in use, chosen on an earlier label snapshot; it is being "
                "graded on the current labels beside your proposals. Improve on it.",
                traces=(),
            )
        )
    cache = DatabaseJudgeCache(search.proposer)

    spent: list[Usage] = []  # read back on this thread: the ORM may not run in the loop

    async def ask() -> list[LlmProposal]:
        async with JudgeClient(settings, cache=cache, budget=budget) as judge:
            spent.append(judge.usage)
            return await llm_propose(
                judge,
                kind=kind,
                material_text=material,
                prior=prior,
                n=count,
                budget_chars=PROPOSER_PROMPT_CHARS,
            )

    try:
        proposals = cache.run(ask())
    except BudgetExhausted as exc:
        raise BudgetSpent from exc
    finally:
        for usage in spent:
            usage_add(usage)
    slots = []
    for proposal in proposals:
        rejected = proposal.rejected or ""
        if proposal.program is not None:
            fingerprint = program_fingerprint(proposal.program)
            if fingerprint in seen:
                rejected = "it grades exactly as an earlier candidate does"
            seen.add(fingerprint)
        slots.append(
            Slot(
                program=None if rejected else proposal.program,
                lineage=f"proposed by {search.proposer.model}"
                + (" after one correction" if proposal.repaired else ""),
                prompt=proposal.prompt,
                raw=proposal.raw,
                errors=proposal.errors,
                rejected=rejected,
            )
        )
    return slots


def _slots_store(search: SearchRun, iteration: int, slots: list[Slot]) -> None:
    with transaction.atomic():
        for position, slot in enumerate(slots):
            metagrader = None
            fingerprint = ""
            if slot.program is not None:
                parent = (
                    Metagrader.objects.filter(
                        project=search.project, content_hash=slot.parent_hash
                    ).first()
                    if slot.parent_hash
                    else None
                )
                is_baseline = iteration == 0 and position == 0
                metagrader = metagrader_register(
                    project=search.project,
                    program=slot.program,
                    origin=Origin.BASELINE if is_baseline else Origin.SEARCH,
                    parent=parent,
                )
                fingerprint = program_fingerprint(program_validate(slot.program).to_json())
            Candidate.objects.create(
                search=search,
                metagrader=metagrader,
                iteration=iteration,
                position=position,
                status=CandidateStatus.REJECTED if metagrader is None else CandidateStatus.PROPOSED,
                lineage=slot.lineage[:500],
                fingerprint=fingerprint,
                prompt=slot.prompt,
                raw=slot.raw,
                errors=list(slot.errors),
                rejected=slot.rejected,
            )
