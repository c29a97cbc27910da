from django import forms

from graders.models import JudgeEndpoint, Metagrader
from labeling.models import Split


class EndpointForm(forms.ModelForm):
    class Meta:
        model = JudgeEndpoint
        fields = [
            "name", "base_url", "model", "api_key_env", "temperature", "max_tokens",
            "max_concurrency", "timeout_s", "price_in_per_mtok", "price_out_per_mtok",
            "response_format", "is_default",
        ]  # fmt: skip
        help_texts = {
            "api_key_env": "Name of the environment variable holding the key on the worker "
            "machines (for example OPENAI_API_KEY). The key itself is never stored.",
            "base_url": "OpenAI-compatible base URL, for example https://api.openai.com/v1 or "
            "http://localhost:8000/v1 for vLLM.",
        }


class RunForm(forms.Form):
    grader = forms.ModelChoiceField(queryset=Metagrader.objects.none())
    endpoint = forms.ModelChoiceField(queryset=JudgeEndpoint.objects.none(), label="Judge")
    split = forms.ChoiceField(choices=[(s, s) for s in Split.values if s != "unassigned"])
    max_calls = forms.IntegerField(
        required=False, min_value=1, help_text="Stop after this many calls."
    )
    max_cost = forms.FloatField(
        required=False, min_value=0, help_text="Stop after this many dollars."
    )

    def __init__(self, *args: object, project: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["grader"].queryset = Metagrader.objects.filter(project=project)  # type: ignore[attr-defined]
        endpoints = JudgeEndpoint.objects.filter(project=project)
        self.fields["endpoint"].queryset = endpoints  # type: ignore[attr-defined]
        default = endpoints.filter(is_default=True).first()
        if default is not None:
            self.fields["endpoint"].initial = default.pk
        self.fields["split"].initial = Split.EVAL
