"""Forms of rubric review. The criterion rules live in reviews.rubric_edit, which every door
goes through; the form only reports them next to the field."""

import re
from typing import Any

from django import forms

from labeling.models import Rubric, Split
from reviews.rubric_edit import MAX_WEIGHT, criterion_problems

# Task ids may hold spaces (they are the importer's strings), so only lines and commas split.
TASK_ID_SEPARATORS = re.compile(r"[,\n]+")


class CriterionForm(forms.Form):
    """One criterion's text and weight, with the rubric version the form was rendered from."""

    key = forms.CharField(required=False, widget=forms.HiddenInput)
    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    text = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Criterion",
    )
    weight = forms.FloatField(
        required=False,
        widget=forms.NumberInput(attrs={"step": "any", "min": "0", "max": f"{MAX_WEIGHT:g}"}),
    )

    @classmethod
    def for_criterion(cls, rubric: Rubric, key: str) -> "CriterionForm":
        """An unbound form on criterion `key` of the rubric as it is now ("" adds one)."""
        item = rubric.items.filter(key=key).first() if key else None
        initial: dict[str, Any] = {"key": key, "version": rubric.version, "weight": 1.0}
        if item is not None:
            initial |= {"text": item.text, "weight": item.weight}
        return cls(initial=initial)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "weight" in self.errors:
            return cleaned
        for name, message in criterion_problems(
            cleaned.get("text", ""), cleaned.get("weight")
        ).items():
            self.add_error(name, message)
        return cleaned


class GenerateForm(forms.Form):
    task_ids = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "t1, t2, t3"}),
        label="Tasks",
        help_text="Task ids, separated by commas or lines. Leave empty to use a split.",
    )
    split = forms.ChoiceField(required=False, choices=[("", "—"), *Split.choices])
    regenerate = forms.BooleanField(
        required=False,
        help_text="Write new rubrics for tasks that have one (a new version; the old one stays "
        "in the history).",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        ids = [
            i.strip() for i in TASK_ID_SEPARATORS.split(cleaned.get("task_ids", "")) if i.strip()
        ]
        cleaned["task_ids"] = list(dict.fromkeys(ids))
        if not ids and not cleaned.get("split"):
            raise forms.ValidationError("Name the tasks or choose a split.")
        return cleaned
