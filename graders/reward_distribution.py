"""How a grader's rewards are spread (issue 18): a histogram of the rewards it gave, one series
per split (its runs', or the tasks' for a run on chosen tasks) and one for the rewards it
served in training (captured rollouts), each as shares so splits of different sizes compare;
failed grades are counted apart. The bins are counted in the database in one statement,
never by loading grades: a grader may have a million.

Bins follow the grader's kind. A pairwise grader's reward is a response's win rate in its
group (ties half a win), and that is what is binned, not the margins of single comparisons:
it is the number a trainer receives, and it is stored per grade. Its bins are centred on
0, 0.1, ..., 1, so an even split (0.5) has a bin of its own and w and 1 - w land in mirrored
bins. A rubric reward (weight share) is binned in tenths of 0..1. A scalar grader's scale is
read from its program (the reward expression over its steps' number outputs): an integer
scale of at most MAX_INTEGER_BINS values gets one bin per value, any other bounded scale ten
equal bins, and a program that leaves its reward unbounded is binned on 0..1 with the rewards
outside that scale counted apart."""

import itertools
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, Count, F, FloatField, IntegerField, Value, When
from django.db.models.functions import Cast, Floor, Least
from django.utils.safestring import SafeString

from graders.engine.programs import NumberType, ProgramInvalid, program_validate
from graders.engine.reward import Clip, Combine, Const, Expr, Ref, WeightedMean
from graders.models import CapturedResponse, Grade, Metagrader
from labeling.charts import HistogramSeries, histogram_svg
from labeling.models import Split
from labeling.templatetags.terms import TERMS

TENTHS = 10
MAX_INTEGER_BINS = 21
# A reward this close below a bin's lower edge counts as on it: a judge's 0.3, times 10,
# is 2.9999999999999996 in floating point, and belongs in the bin that starts at 0.3.
EDGE_SLACK = 1e-9
# Bin indexes of rewards outside the scale; a failed grade (no reward) has no bin (NULL).
BELOW, ABOVE = -1, 10_000
SERVED = "served"
SERIES_ORDER = (Split.META, Split.SELECTION, Split.TRAIN, Split.EVAL, Split.UNASSIGNED)
SERVED_LABEL = "served in training"


@dataclass(frozen=True)
class Bins:
    """`count` bins over the scale [low, high]. Plain bins split it into equal parts, each
    holding its lower edge, the last also `high`; centred bins sit on low, low + step, ...,
    high, each holding from half a step below its centre (inclusive) to half a step above."""

    low: float
    high: float
    count: int
    centred: bool
    assumed: bool = False  # the program does not bound its reward: 0..1 is a guess

    @property
    def step(self) -> float:
        return (self.high - self.low) / (self.count - 1 if self.centred else self.count)

    def index_expression(self, field: str) -> Case:
        """The bin index of `field` in SQL: 0..count-1, BELOW or ABOVE off the scale, NULL
        when there is no reward. Multiplying by bins-per-unit, not dividing by the step,
        keeps a value on an edge exact (0.3 / 0.1 is 2.9999999999999996)."""
        per_unit = (self.count - 1 if self.centred else self.count) / (self.high - self.low)
        offset = (0.5 if self.centred else 0.0) + EDGE_SLACK
        position = (F(field) - Value(self.low)) * Value(per_unit) + Value(offset)
        return Case(
            When(**{f"{field}__isnull": True}, then=Value(None)),
            When(**{f"{field}__lt": self.low}, then=Value(BELOW)),
            When(**{f"{field}__gt": self.high}, then=Value(ABOVE)),
            default=Least(
                Cast(Floor(position, output_field=FloatField()), IntegerField()),
                Value(self.count - 1),
            ),
            output_field=IntegerField(),
        )

    def ranges(self) -> list[str]:
        """Each bin's range in words, for the table and the tooltips."""
        if self.centred:
            half = self.step / 2
            texts = []
            for index in range(self.count):
                centre = self.low + index * self.step
                start, end = max(centre - half, self.low), min(centre + half, self.high)
                if self.step == 1:
                    texts.append(_number(centre))
                elif index == self.count - 1:
                    texts.append(f"{_number(start)} to {_number(end)}")
                else:
                    texts.append(f"{_number(start)} to under {_number(end)}")
            return texts
        edges = [self.low + index * self.step for index in range(self.count + 1)]
        return [
            f"{_number(start)} to {'' if index == self.count - 1 else 'under '}{_number(end)}"
            for index, (start, end) in enumerate(itertools.pairwise(edges))
        ]

    def ticks(self) -> list[tuple[float, str]]:
        """The x axis labels: centred bins at their middles, plain bins at their edges."""
        if self.centred:
            return [(i + 0.5, _number(self.low + i * self.step)) for i in range(self.count)]
        return [(float(i), _number(self.low + i * self.step)) for i in range(self.count + 1)]


def _number(value: float) -> str:
    return f"{round(value, 6):g}"


def reward_bins(grader: Metagrader) -> Bins:
    """The bins that suit the grader's kind and scale (the module's docstring says why)."""
    if grader.kind in ("pairwise", "pairwise_rubric"):
        return Bins(0.0, 1.0, TENTHS + 1, centred=True)
    if grader.kind != "scalar":
        return Bins(0.0, 1.0, TENTHS, centred=False)
    try:
        program = program_validate(grader.program)
    except ProgramInvalid:
        program = None
    outputs = {step.id: step.output for step in program.steps} if program else {}
    scale = _scale(program.reward, outputs) if program and program.reward else None
    if scale is None or not scale[0] < scale[1]:
        return Bins(0.0, 1.0, TENTHS, centred=False, assumed=True)
    low, high, integer = scale
    if integer and high - low + 1 <= MAX_INTEGER_BINS:
        return Bins(low, high, int(high - low) + 1, centred=True)
    return Bins(low, high, TENTHS, centred=False)


def _scale(expr: Expr, outputs: dict[str, Any]) -> tuple[float, float, bool] | None:
    """(low, high, whether only integers come out) of a reward expression, from the ranges
    of the number outputs it reads; None when some output it reads has no range."""
    match expr:
        case Const(value=value):
            return value, value, value.is_integer()
        case Ref(step=step, field=field):
            spec = outputs.get(step, {}).get(field)
            if isinstance(spec, NumberType) and spec.low is not None and spec.high is not None:
                return spec.low, spec.high, spec.integer
            return None
        case Combine(op=op, args=args):
            return _hull([_scale(arg, outputs) for arg in args], integer=op != "mean")
        case WeightedMean(terms=terms):
            return _hull([_scale(arg, outputs) for arg, _ in terms], integer=False)
        case Clip(arg=arg, low=low, high=high):
            inner = _scale(arg, outputs) or (low, high, False)
            return (
                min(max(inner[0], low), high),
                min(max(inner[1], low), high),
                inner[2] and low.is_integer() and high.is_integer(),
            )
    return None


def _hull(
    scales: list[tuple[float, float, bool] | None], *, integer: bool
) -> tuple[float, float, bool] | None:
    """The range a mean, min or max of these can take; integer when `integer` allows it and
    every part is."""
    if any(scale is None for scale in scales):
        return None
    known = [scale for scale in scales if scale is not None]
    return (
        min(s[0] for s in known),
        max(s[1] for s in known),
        integer and all(s[2] for s in known),
    )


@dataclass(frozen=True)
class RewardSeries:
    """One series' counts: per bin, rewards outside the scale, and failed (no reward)."""

    key: str
    counts: list[int]
    outside: int
    failed: int

    @property
    def rewarded(self) -> int:
        return sum(self.counts) + self.outside

    @property
    def label(self) -> str:
        return SERVED_LABEL if self.key == SERVED else TERMS.get(self.key, self.key)

    @property
    def hint(self) -> str:
        return f"split {self.key}" if self.key in TERMS else ""

    def shares(self) -> list[float]:
        return [count / self.rewarded if self.rewarded else 0.0 for count in self.counts]


def reward_distribution(*, grader: Metagrader) -> tuple[Bins, list[RewardSeries]]:
    """The grader's bins and its series: one per split (in the splits' order), then the
    rewards captured rollouts were given under it, if any. A grade counts under its run's
    split, the tasks the run was started on; a run on chosen tasks (no split) counts each
    grade under its task's split. Every grade of every run counts, so a response graded by two
    runs counts twice; the shares are what compares. One aggregate statement; the runs' split
    spares most grades the join to their task (a million grades of one grader on PostgreSQL,
    2 cores: 0.29-0.31 s, against 0.36-0.40 s with every grade joined to its task)."""
    bins = reward_bins(grader)
    index = bins.index_expression("reward")
    grades = Grade.objects.filter(run__metagrader=grader).order_by()
    by_run = (
        grades.exclude(run__split="")
        .values(series=F("run__split"), bin=index)
        .annotate(n=Count("pk"))
    )
    by_task = (
        grades.filter(run__split="")
        .values(series=F("response__task__split"), bin=index)
        .annotate(n=Count("pk"))
    )
    served = (
        CapturedResponse.objects.filter(group__metagrader=grader)
        .order_by()
        .values(series=Value(SERVED), bin=index)
        .annotate(n=Count("pk"))
    )
    found: dict[str, dict[int | None, int]] = {}
    for row in by_run.union(by_task, served, all=True):
        counted = found.setdefault(row["series"], {})
        counted[row["bin"]] = counted.get(row["bin"], 0) + row["n"]
    order = [*SERIES_ORDER, SERVED]
    series = []
    for key in sorted(found, key=lambda k: order.index(k) if k in order else len(order)):
        counted = found[key]
        series.append(
            RewardSeries(
                key=key,
                counts=[counted.get(index, 0) for index in range(bins.count)],
                outside=counted.get(BELOW, 0) + counted.get(ABOVE, 0),
                failed=counted.get(None, 0),
            )
        )
    return bins, series


def reward_distribution_panel(*, grader: Metagrader) -> dict[str, Any]:
    """The grader page's reward distribution: the chart (None when nothing was graded), the
    table rows under it and the counts of failed and off-scale rewards."""
    bins, series = reward_distribution(grader=grader)
    ranges = bins.ranges()
    chart: SafeString | None = None
    if any(s.rewarded for s in series):
        chart = histogram_svg(
            title=f"Rewards given by {grader.name}",
            description="Share of each split's rewards in each bin, and of the rewards served "
            "in training when rollouts were captured. The table under it gives the same "
            "numbers.",
            x_label="Win rate" if grader.kind.startswith("pairwise") else "Reward",
            bins=ranges,
            ticks=bins.ticks(),
            series=[HistogramSeries(s.label, s.hint, s.counts, s.rewarded) for s in series],
        )
    return {
        "reward_bins": bins,
        "reward_series": series,
        "reward_rows": [
            (text, [(s.counts[index], 100 * s.shares()[index]) for s in series])
            for index, text in enumerate(ranges)
        ],
        "reward_chart": chart,
        "reward_failed": sum(s.failed for s in series),
        "reward_outside": sum(s.outside for s in series),
    }
