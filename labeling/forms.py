from django import forms

from labeling.models import INT_FIELD_MAX, Project, Role, Split
from labeling.project_settings import SETTINGS_FIELDS
from labeling.strategies import StrategySpec


class ImportForm(forms.Form):
    file = forms.FileField(
        help_text="A JSON Lines file in the import format.",
        widget=forms.ClearableFileInput(
            attrs={"accept": ".jsonl,.ndjson,.json,.txt,application/x-ndjson,application/json"}
        ),
    )


class SplitForm(forms.Form):
    meta = forms.FloatField(min_value=0, max_value=1, initial=0.2)
    selection = forms.FloatField(min_value=0, max_value=1, initial=0.2)
    train = forms.FloatField(min_value=0, max_value=1, initial=0.4)
    eval = forms.FloatField(min_value=0, max_value=1, initial=0.2)
    seed = forms.IntegerField(initial=0)
    holdout = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Hold out whole domains (all go to eval)",
    )

    def __init__(self, *args: object, domains: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["holdout"].choices = [(d, d or "(no domain)") for d in domains]

    def fractions(self) -> dict[str, float]:
        return {split: self.cleaned_data[split] for split in Split.values if split != "unassigned"}


class TaskFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Search")
    domain = forms.ChoiceField(required=False)
    split = forms.ChoiceField(required=False, choices=[("", "Any split"), *Split.choices])

    def __init__(self, *args: object, domains: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["domain"].choices = [("", "Any domain"), *[(d, d or "(none)") for d in domains]]


class QueueBuildForm(forms.Form):
    dimensions = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="One block per dimension, in this order; none selected: one overall block.",
    )
    pairs_per_task = forms.IntegerField(min_value=1, max_value=100, initial=10)
    seed = forms.IntegerField(initial=0)

    def __init__(self, *args: object, dimension_names: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["dimensions"].choices = [(name, name) for name in dimension_names]


class QueueStrategyForm(forms.Form):
    strategy = forms.ChoiceField(widget=forms.RadioSelect)
    epsilon = forms.FloatField(
        min_value=0,
        max_value=1,
        label="Random share",
        help_text="The share of pairs a sampling strategy draws uniformly at random, so that "
        "metrics on its labels can be reweighted without bias (0 to 1).",
    )
    refresh_labels = forms.IntegerField(
        min_value=0,
        max_value=INT_FIELD_MAX,
        label="Rewrite priorities every",
        help_text="new labels (0: only after search rounds and on demand).",
    )

    def __init__(self, *args: object, specs: list[StrategySpec], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["strategy"].choices = [(spec.name, spec.label) for spec in specs]


class ProjectSettingsForm(forms.ModelForm):  # type: ignore[type-arg]
    overlap = forms.IntegerField(
        min_value=1, max_value=20, help_text="How many annotators label each pair."
    )

    class Meta:
        model = Project
        fields = list(SETTINGS_FIELDS)
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 8})}
        help_texts = {
            "guidelines": "Shown to experts beside every pair; Markdown (links, lists, emphasis), "
            "sanitized: no images, scripts or raw HTML.",
            "allow_ties": "Let experts answer that neither response is better.",
        }


class ProjectCreateForm(forms.Form):
    name = forms.CharField(max_length=200)
    slug = forms.SlugField(
        max_length=80,
        required=False,
        label="Web address",
        help_text="Letters, digits and hyphens; empty: made from the name.",
    )


class DimensionAddForm(forms.Form):
    name = forms.CharField(max_length=100)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class MemberAddForm(forms.Form):
    who = forms.CharField(max_length=254, label="Username or email")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.EXPERT)
