"""Taking a synthesis's human validation sample and sending it to the labeling queue.

The sample is drawn from first draws (retry 0) whose cascade finished, kept or vetoed: the
paper's D_0, so that the depths and each judge's rejects can be compared with the humans. A
failed or pending draw has no decided pair to show. The draws are stratified by dimension,
domain and contrast (graders.engine.synthesis.validation_sample) and each becomes a queue pair
on its cell's dimension with three slots: labeled blind in the ordinary label page, which
shows the two responses and the dimension and nothing of how they were made.
"""

from dataclasses import dataclass

from django.db import transaction

from graders.engine.synthesis.validation import VALIDATION_OVERLAP
from graders.engine.synthesis.validation_sample import SampleCandidate, stratified_sample
from graders.synthesis.validation_selectors import validation_eligible
from labeling.models import Synthesis, SynthesisDraw
from labeling.queue import PinnedPair, queue_pairs_pin

DEFAULT_SAMPLE_SIZE = 150
VALIDATION_STRATEGY = "synthesis_validation"


class SampleRefused(ValueError):
    pass


@dataclass(frozen=True)
class SampleResult:
    eligible: int
    sampled: int
    added: int


def synthesis_validation_sample(*, synthesis: Synthesis, size: int, seed: int) -> SampleResult:
    """Grow the synthesis's validation sample to `size` (or every eligible draw when there
    are fewer), stratified and seeded, and queue every sampled draw for labeling. Draws
    already sampled stay, so asking twice adds nothing and queues nothing twice."""
    if size < 1:
        raise SampleRefused("the sample size must be at least 1")
    with transaction.atomic():
        # One sampling at a time per synthesis: two admins clicking together see one result.
        Synthesis.objects.select_for_update().filter(pk=synthesis.pk).first()
        rows = list(
            validation_eligible(synthesis=synthesis).values_list(
                "pk",
                "cell__dimension__name",
                "cell__task__domain",
                "cell__low_level",
                "cell__high_level",
                "validation_sampled",
            )
        )
        if not rows:
            raise SampleRefused(
                "nothing to sample yet: no first draw of this synthesis has finished its cascade"
            )
        candidates = [
            SampleCandidate(pk, (dimension, domain, f"{low}-{high}"), sampled)
            for pk, dimension, domain, low, high, sampled in rows
        ]
        chosen = stratified_sample(candidates, size=size, seed=seed)
        before = sum(c.sampled for c in candidates)
        SynthesisDraw.objects.filter(pk__in=chosen, validation_sampled=False).update(
            validation_sampled=True
        )
        pairs = [
            PinnedPair(task_id, low, high, dimension_id)
            for task_id, low, high, dimension_id in SynthesisDraw.objects.filter(
                pk__in=chosen
            ).values_list(
                "cell__task_id", "low_response_id", "high_response_id", "cell__dimension_id"
            )
        ]
        queue_pairs_pin(
            project=synthesis.project,
            pairs=pairs,
            overlap=VALIDATION_OVERLAP,
            strategy=VALIDATION_STRATEGY,
            seed=seed,
        )
    return SampleResult(eligible=len(rows), sampled=len(chosen), added=len(chosen) - before)
