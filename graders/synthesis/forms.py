"""The form that starts a synthesis run. The service checks everything again (the command and
any other caller go through it); the form gives a person field errors first."""

from typing import Any

from django import forms

from graders.forms import budget_fields
from graders.models import JudgeEndpoint, RolloutMode
from graders.synthesis.runs import MAX_RETRIES, MAX_TURN_CAP
from labeling.models import INT_FIELD_MAX, Dimension, Project, Split, Task

CASCADE_FIELDS = ("judge_1", "judge_2", "judge_3", "judge_4")


class SynthesisForm(forms.Form):
    name = forms.SlugField(
        required=False,
        max_length=200,
        help_text="The synthesis id (annotator of its labels, prefix of its responses' ids). "
        "Empty: synthesis-N.",
    )
    dimensions = forms.ModelMultipleChoiceField(
        queryset=Dimension.objects.none(), widget=forms.CheckboxSelectMultiple
    )
    split = forms.ChoiceField(required=False, help_text="Only this split's tasks.")
    domain = forms.ChoiceField(required=False, help_text="Or only this domain's tasks.")
    agents = forms.ModelMultipleChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        widget=forms.CheckboxSelectMultiple,
        help_text="One is drawn per cell with the seed and answers both of its levels.",
    )
    writer = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        label="Steering writer",
        help_text="Writes each cell's bad, ok and good instructions (admins alone read them).",
    )
    judge_1 = forms.ModelChoiceField(queryset=JudgeEndpoint.objects.none(), label="Filter judge 1")
    judge_2 = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(), required=False, label="Filter judge 2"
    )
    judge_3 = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(), required=False, label="Filter judge 3"
    )
    judge_4 = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(), required=False, label="Filter judge 4"
    )
    retries = forms.IntegerField(
        label="Retries R",
        min_value=0,
        max_value=MAX_RETRIES,
        initial=2,
        help_text="A vetoed cell is drawn again with the same steering up to R times.",
    )
    mode = forms.ChoiceField(choices=RolloutMode.choices, initial=RolloutMode.SINGLE)
    user_simulator = forms.ModelChoiceField(
        queryset=JudgeEndpoint.objects.none(),
        required=False,
        label="User simulator",
        help_text="Conversation mode: plays the task's user instructions.",
    )
    turn_cap = forms.IntegerField(min_value=1, max_value=MAX_TURN_CAP, initial=8)
    webhook_url = forms.URLField(
        required=False,
        max_length=500,
        label="Rollout webhook URL",
        help_text="Webhook mode: each job is POSTed here (no keys are sent).",
    )
    seed = forms.IntegerField(min_value=0, max_value=INT_FIELD_MAX, initial=0)
    max_calls, max_cost = budget_fields(
        calls_help="Stop after this many calls (all endpoints).", cost_min=0.000001
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        endpoints = JudgeEndpoint.objects.filter(project=project).order_by("name")
        for name in ("agents", "writer", "user_simulator", *CASCADE_FIELDS):
            self.fields[name].queryset = endpoints  # type: ignore[attr-defined]
        self.fields["dimensions"].queryset = Dimension.objects.filter(  # type: ignore[attr-defined]
            project=project
        )
        self.fields["split"].choices = [("", "All splits")] + [
            (s, s) for s in Split.values if s != Split.UNASSIGNED
        ]
        domains = (
            Task.objects.filter(project=project)
            .exclude(domain="")
            .values_list("domain", flat=True)
            .distinct()
            .order_by("domain")
        )
        self.fields["domain"].choices = [("", "All domains")] + [(d, d) for d in domains]
        first = list(endpoints[:2])
        for name, endpoint in zip(("judge_1", "judge_2"), first, strict=False):
            self.fields[name].initial = endpoint.pk

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("split") and cleaned.get("domain"):
            self.add_error("domain", "Choose a split or a domain, not both.")
        judges = [cleaned[n] for n in CASCADE_FIELDS if cleaned.get(n) is not None]
        if len({j.pk for j in judges}) != len(judges):
            self.add_error(None, "A filter judge appears twice in the cascade.")
        mode = cleaned.get("mode")
        if mode == RolloutMode.CONVERSATION and cleaned.get("user_simulator") is None:
            self.add_error("user_simulator", "A conversation needs a user simulator.")
        if mode == RolloutMode.WEBHOOK and not cleaned.get("webhook_url"):
            self.add_error("webhook_url", "The webhook mode needs a URL.")
        cleaned["judges"] = judges
        return cleaned

    def start_arguments(self) -> dict[str, Any]:
        """The cleaned values as synthesis_start's keyword arguments."""
        data = self.cleaned_data
        return {
            "name": data["name"],
            "dimensions": list(data["dimensions"]),
            "agents": list(data["agents"]),
            "writer": data["writer"],
            "judges": data["judges"],
            "split": data["split"],
            "domain": data["domain"],
            "retries": data["retries"],
            "mode": data["mode"],
            "user_simulator": (
                data["user_simulator"] if data["mode"] == RolloutMode.CONVERSATION else None
            ),
            "turn_cap": data["turn_cap"],
            "webhook_url": data["webhook_url"] if data["mode"] == RolloutMode.WEBHOOK else "",
            "seed": data["seed"],
            "max_calls": data["max_calls"],
            "max_cost": data["max_cost"],
        }


class HarnessImportForm(forms.Form):
    file = forms.FileField(help_text="JSON Lines: one trajectory per open job.")
