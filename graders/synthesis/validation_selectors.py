"""Reading a synthesis's human validation: the sampled pairs with their cascade votes and
human labels, handed to the pure Table 2 arithmetic (graders.engine.synthesis.validation)."""

from collections import Counter
from typing import Any

from django.db.models import QuerySet

from graders.engine.synthesis.validation import (
    ValidationInput,
    ValidationPair,
    ValidationReport,
    Verdict,
    validation_json,
    validation_report,
)
from labeling.models import (
    Choice,
    DrawOutcome,
    Preference,
    Project,
    Provider,
    Synthesis,
    SynthesisDraw,
)

NO_DOMAIN = "(none)"


def validation_eligible(*, synthesis: Synthesis) -> QuerySet[SynthesisDraw]:
    """The first draws a sample may hold: cascade finished, both responses present."""
    return SynthesisDraw.objects.filter(
        cell__synthesis=synthesis,
        retry=0,
        outcome__in=[DrawOutcome.KEPT, DrawOutcome.VETOED],
        low_response__isnull=False,
        high_response__isnull=False,
    )


class SynthesisNotFound(LookupError):
    pass


def synthesis_pick(*, project: Project, external_id: str | None) -> Synthesis:
    """The synthesis named `external_id`, or the project's only one when no id is given."""
    syntheses = Synthesis.objects.filter(project=project)
    if external_id is not None:
        found = syntheses.filter(external_id=external_id).first()
        if found is None:
            raise SynthesisNotFound(f"project {project.slug!r} has no synthesis {external_id!r}")
        return found
    names = sorted(syntheses.values_list("external_id", flat=True))
    if not names:
        raise SynthesisNotFound(f"project {project.slug!r} has no synthesis")
    if len(names) > 1:
        raise SynthesisNotFound(
            f"project {project.slug!r} has {len(names)} syntheses ({', '.join(names)}): "
            "name one with --synthesis"
        )
    return syntheses.get()


def _sampled(synthesis: Synthesis) -> list[SynthesisDraw]:
    return list(
        validation_eligible(synthesis=synthesis)
        .filter(validation_sampled=True)
        .select_related("cell")
        .prefetch_related("votes")
        .order_by("pk")
    )


def _pair_key(draw: SynthesisDraw) -> tuple[int, int, int]:
    low, high = draw.low_response_id, draw.high_response_id
    return (min(low, high), max(low, high), draw.cell.dimension_id)


def _human_verdicts(draws: list[SynthesisDraw]) -> dict[tuple[int, int, int], list[Verdict]]:
    """Every current human label on a sampled pair's dimension (either side order), keyed by
    _pair_key and said in level terms: which level's response the person preferred."""
    high_of = {_pair_key(d): d.high_response_id for d in draws}
    responses = {r for key in high_of for r in key[:2]}
    verdicts: dict[tuple[int, int, int], list[Verdict]] = {key: [] for key in high_of}
    labels = Preference.objects.filter(
        provider=Provider.HUMAN,
        is_current=True,
        dimension_id__in={key[2] for key in high_of},
        response_a_id__in=responses,
        response_b_id__in=responses,
    ).values_list("response_a_id", "response_b_id", "dimension_id", "choice")
    for a, b, dimension_id, choice in labels:
        key = (min(a, b), max(a, b), dimension_id)
        if key not in high_of:
            continue  # two sampled responses that are not one pair
        if choice == Choice.TIE:
            verdicts[key].append("tie")
        else:
            winner = a if choice == Choice.A else b
            verdicts[key].append("high" if winner == high_of[key] else "low")
    return verdicts


def validation_input(*, synthesis: Synthesis) -> ValidationInput:
    """The sampled first draws, their cascades in order and their human labels."""
    draws = _sampled(synthesis)
    verdicts = _human_verdicts(draws)
    return ValidationInput(
        judges=tuple(synthesis.judges),
        pairs=tuple(
            ValidationPair(
                low_id=d.low_response_id,
                high_id=d.high_response_id,
                cascade=tuple(v.agrees for v in sorted(d.votes.all(), key=lambda v: v.position)),
                human=tuple(verdicts[_pair_key(d)]),
            )
            for d in draws
        ),
    )


def synthesis_validation_json(*, synthesis: Synthesis) -> dict[str, Any]:
    """The `synthesis_validation --json` document (FORMATS.md)."""
    return validation_json(validation_report(validation_input(synthesis=synthesis)))


def _strata(synthesis: Synthesis) -> list[dict[str, Any]]:
    """Eligible and sampled first draws per (dimension, domain, contrast)."""
    eligible: Counter[tuple[str, str, str]] = Counter()
    sampled: Counter[tuple[str, str, str]] = Counter()
    for dimension, domain, low, high, is_sampled in validation_eligible(
        synthesis=synthesis
    ).values_list(
        "cell__dimension__name",
        "cell__task__domain",
        "cell__low_level",
        "cell__high_level",
        "validation_sampled",
    ):
        key = (dimension, domain or NO_DOMAIN, f"{low}-{high}")
        eligible[key] += 1
        sampled[key] += is_sampled
    return [
        {
            "dimension": key[0],
            "domain": key[1],
            "contrast": key[2],
            "eligible": eligible[key],
            "sampled": sampled[key],
        }
        for key in sorted(eligible)
    ]


def _depth_name(depth: int, judges: list[str]) -> str:
    if depth == 0:
        return "unfiltered"
    return " & ".join(judges[:depth])


def synthesis_validation_view(*, synthesis: Synthesis) -> dict[str, Any]:
    """What the validation page shows: Table 2, each judge's rejects, the
    labeling progress of the sample and its make-up by stratum."""
    data = validation_input(synthesis=synthesis)
    report: ValidationReport = validation_report(data)
    depths = [
        {**row, "name": _depth_name(row["depth"], list(data.judges)), "judged": depth.judged}
        for row, depth in zip(validation_json(report)["depths"], report.depths, strict=True)
    ]
    labels = sum(min(len(p.human), data.min_labels) for p in data.pairs)
    return {
        "report": report,
        "depths": depths,
        "progress": {
            "sampled": report.sampled,
            "complete": report.complete,
            "no_majority": report.no_majority,
            "labels": labels,
            "wanted": report.sampled * data.min_labels,
            "overlap": data.min_labels,
        },
        "strata": _strata(synthesis),
    }
