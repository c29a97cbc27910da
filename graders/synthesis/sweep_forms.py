"""The form that starts an evaluator sweep."""

from typing import Any

from django import forms

from graders.forms import budget_fields
from graders.models import JudgeEndpoint, Metagrader
from graders.synthesis.sweep import DEFAULT_RUNS, MAX_RUNS
from labeling.models import Project, Synthesis


class SweepForm(forms.Form):
    synthesis = forms.ModelChoiceField(
        queryset=Synthesis.objects.none(), help_text="Its kept pairs are scored."
    )
    judges = forms.ModelMultipleChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Judge endpoints",
        help_text="Each scores every response alone with the evaluator prompt.",
    )
    graders = forms.ModelMultipleChoiceField(
        queryset=Metagrader.objects.none(),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),  # search candidates make this list long
        label="Scalar graders",
        help_text="Each scores every response with its own program.",
    )
    grader_endpoint = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        required=False,
        label="Endpoint for the graders",
        empty_label="The project's default judge",
    )
    runs = forms.IntegerField(
        min_value=1, max_value=MAX_RUNS, initial=DEFAULT_RUNS,
        help_text="Scores per response and evaluator; the spread across runs is its stability.",
    )  # fmt: skip
    max_calls, max_cost = budget_fields()

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        endpoints = JudgeEndpoint.objects.filter(project=project)
        self.fields["synthesis"].queryset = Synthesis.objects.filter(project=project)  # type: ignore[attr-defined]
        self.fields["judges"].queryset = endpoints  # type: ignore[attr-defined]
        self.fields["grader_endpoint"].queryset = endpoints  # type: ignore[attr-defined]
        graders = self.fields["graders"]
        graders.queryset = Metagrader.objects.filter(project=project, kind="scalar").order_by(  # type: ignore[attr-defined]
            "-created_at", "-pk"
        )
        graders.label_from_instance = lambda g: f"#{g.pk} {g.name}"  # type: ignore[attr-defined]
        if not graders.queryset.exists():  # type: ignore[attr-defined]
            graders.help_text = "This project has no scalar grader yet."
        if not endpoints.exists():
            self.fields["judges"].help_text = "This project has no judge endpoint yet."

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not cleaned.get("judges") and not cleaned.get("graders") and not self.errors:
            raise forms.ValidationError("Choose at least one judge endpoint or scalar grader.")
        return cleaned
