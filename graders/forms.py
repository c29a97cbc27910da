from collections.abc import Mapping
from typing import Any

from django import forms

from graders.engine.programs import KINDS
from graders.engine.selection import DEFAULT_RULE
from graders.models import (
    GradingRun,
    JudgeEndpoint,
    Metagrader,
    SearchMode,
    SearchRun,
    SelectionRuleChoice,
    SynthesisSweep,
)
from graders.search import MAX_CANDIDATES
from labeling.models import INT_FIELD_MAX, Project, Split

# A dollar budget past this is a typo, not a plan.
MAX_BUDGET_DOLLARS = 1_000_000.0


class EndpointForm(forms.ModelForm):
    class Meta:
        model = JudgeEndpoint
        fields = [
            "name", "base_url", "model", "api_key_env", "temperature", "max_tokens",
            "max_concurrency", "timeout_s", "price_in_per_mtok", "price_out_per_mtok",
            "response_format", "is_default",
        ]  # fmt: skip
        labels = {
            "base_url": "Base URL",
            "api_key_env": "API key variable",
            "timeout_s": "Timeout (s)",
            "price_in_per_mtok": "$ per million input tokens",
            "price_out_per_mtok": "$ per million output tokens",
            "is_default": "The project's default judge",
        }
        help_texts = {
            "api_key_env": "Name of the environment variable holding the key on the worker "
            "machines (for example OPENAI_API_KEY). The key itself is never stored.",
            "base_url": "OpenAI-compatible base URL, for example https://api.openai.com/v1, or "
            "http://10.0.0.5:8000/v1 for a vLLM server the operator allows (JUDGE_PRIVATE_HOSTS).",
        }

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.instance.project = project

    def clean_name(self) -> str:
        # The form leaves the project out, so Django skips the (project, name) constraint.
        name: str = self.cleaned_data["name"]
        taken = JudgeEndpoint.objects.filter(project=self.instance.project, name=name)
        if taken.exclude(pk=self.instance.pk).exists():
            raise forms.ValidationError(
                f"This project already has a judge named {name!r}; choose another name."
            )
        return name


def budget_fields(
    *,
    calls_help: str = "Stop after this many calls.",
    cost_min: float = 0,
    cost_max: float | None = MAX_BUDGET_DOLLARS,
) -> tuple[forms.IntegerField, forms.FloatField]:
    """A start form's optional budget, `max_calls, max_cost = budget_fields()`: at most so many
    calls (`calls_help` says which count) and so many dollars."""
    return (
        forms.IntegerField(
            required=False, min_value=1, max_value=INT_FIELD_MAX, help_text=calls_help
        ),
        forms.FloatField(
            required=False,
            min_value=cost_min,
            max_value=cost_max,
            help_text="Stop after this many dollars.",
        ),
    )


class RunForm(forms.Form):
    grader = forms.ModelChoiceField(queryset=Metagrader.objects.none())
    endpoint = forms.ModelChoiceField(queryset=JudgeEndpoint.objects.none(), label="Judge")
    split = forms.ChoiceField(choices=[(s, s) for s in Split.values if s != "unassigned"])
    max_calls, max_cost = budget_fields()

    def __init__(self, *args: object, project: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # Search candidates become graders too, so the list grows: by kind, newest first, each
        # with its id and where it came from.
        graders = Metagrader.objects.filter(project=project).order_by("kind", "-created_at", "-pk")
        grader = self.fields["grader"]
        grader.queryset = graders  # type: ignore[attr-defined]
        grader.label_from_instance = (  # type: ignore[attr-defined]
            lambda g: f"{g.kind} · #{g.pk} {g.name} ({g.get_origin_display().lower()})"
        )
        endpoints = JudgeEndpoint.objects.filter(project=project)
        self.fields["endpoint"].queryset = endpoints  # type: ignore[attr-defined]
        default = endpoints.filter(is_default=True).first()
        if default is not None:
            self.fields["endpoint"].initial = default.pk
        self.fields["split"].initial = Split.EVAL


KIND_LABELS = {
    "scalar": "Scalar: a score per response",
    "pairwise": "Pairwise: compare two responses",
    "rubric": "Rubric: write criteria, check each",
    "pairwise_rubric": "Pairwise with rubrics",
}


LOCAL_DEMO_N = 1


class SearchForm(forms.Form):
    kind = forms.ChoiceField(choices=[(kind, KIND_LABELS[kind]) for kind in KINDS])
    mode = forms.ChoiceField(choices=SearchMode.choices, initial=SearchMode.BEST_OF_N)
    endpoint = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        label="Judge",
        help_text="Grades every candidate on D_selection and the best ones on D_eval.",
    )
    proposer = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        required=False,
        empty_label="Structured proposer (no model)",
        help_text="A strong model that writes candidates from D_meta. Without one, programs "
        "are mutated from a library of building blocks.",
    )
    n = forms.IntegerField(
        label="N", min_value=1, max_value=MAX_CANDIDATES, initial=3,
        help_text="Candidates in the first round.",
    )  # fmt: skip
    iterations = forms.IntegerField(
        min_value=0, max_value=MAX_CANDIDATES, initial=0,
        help_text="Rounds after the first, each reading all before it.",
    )  # fmt: skip
    k = forms.IntegerField(
        label="k", min_value=1, max_value=MAX_CANDIDATES, initial=3,
        help_text="Candidates per later round.",
    )  # fmt: skip
    seed = forms.IntegerField(
        min_value=0, max_value=INT_FIELD_MAX, initial=0,
        help_text="The same seed repeats the same search.",
    )  # fmt: skip
    selection_rule = forms.ChoiceField(
        label="Selection rule",
        # Blank (or left out) is the default rule, which falls back to argmax while
        # D_selection is too small to split; a rule chosen here is held to.
        choices=[
            ("", f"Default: {DEFAULT_RULE.value}, or argmax while too few tasks are labeled"),
            *SelectionRuleChoice.choices,
        ],
        initial="",
        required=False,
        help_text="A search that shows the proposer its results on D_selection ends up fitting "
        "those few tasks, and the winner's accuracy there reads too high. The holdout rules "
        "keep a fifth of D_selection from the proposer and pick the winner there; the lower "
        "bound and P(best) discount a lead that rests on a few tasks.",
    )
    max_calls, max_cost = budget_fields(
        calls_help="Stop after this many judge and proposer calls.", cost_max=None
    )

    def clean_selection_rule(self) -> str | None:
        return self.cleaned_data.get("selection_rule") or None

    def __init__(self, *args: object, project: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        endpoints = JudgeEndpoint.objects.filter(project=project)
        self.fields["endpoint"].queryset = endpoints  # type: ignore[attr-defined]
        self.fields["proposer"].queryset = endpoints  # type: ignore[attr-defined]
        default = endpoints.filter(is_default=True).first()
        if default is not None:
            self.fields["endpoint"].initial = default.pk
        if default is not None and default.is_local_demo:
            # The bundled judge answers one call at a time, a few seconds each on two cores.
            self.fields["n"].initial = LOCAL_DEMO_N
            self.fields["n"].help_text += (
                " The local demo judge takes a few seconds per call: N=1 (the baseline and one "
                "proposal) grades the demo project in minutes; every extra candidate adds some."
            )


class ResumeBudgetForm(forms.Form):
    """A stopped run's or search's budget (`limits`: its max_calls and max_cost, totals that
    count what it spent), raised or kept. A limit can only go up, and one already spent must
    go up: kept, it would stop the job again at once."""

    max_calls = forms.IntegerField(
        required=False, min_value=1, max_value=INT_FIELD_MAX, label="Call budget"
    )
    max_cost = forms.FloatField(
        required=False, min_value=0, max_value=MAX_BUDGET_DOLLARS, label="Dollar budget"
    )

    def __init__(
        self,
        *args: object,
        limits: GradingRun | SearchRun | SynthesisSweep,
        spent: Mapping[str, Any],
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.limits = limits
        self.spent = {"max_calls": int(spent.get("calls", 0)), "max_cost": spent.get("cost", 0)}
        for name in ("max_calls", "max_cost"):
            limit = getattr(limits, name)
            self.fields[name].help_text = (
                "Empty keeps no limit."
                if limit is None
                else f"Now {limit:g}; a higher limit, or empty to keep it."
            ) + f" Spent so far: {_amount(name, self.spent[name])}."

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        for name in ("max_calls", "max_cost"):
            limit, value = getattr(self.limits, name), cleaned.get(name)
            if limit is None or name in self.errors:
                continue
            if value is not None and value <= limit:
                self.add_error(name, f"Must be above the current limit of {limit:g}.")
            elif value is None and self.spent[name] >= limit:
                spent = _amount(name, self.spent[name])
                self.add_error(
                    name, f"The limit of {limit:g} is spent ({spent}): give a higher one to resume."
                )
        return cleaned


def _amount(name: str, value: float) -> str:
    return f"${value:.4f}" if name == "max_cost" else f"{value:g} calls"
