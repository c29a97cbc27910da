"""The form an admin starts a synthesis's validation sample with."""

from django import forms

from graders.synthesis.validation_services import DEFAULT_SAMPLE_SIZE
from labeling.models import INT_FIELD_MAX

# Far beyond a panel's labeling capacity (three labels per pair: 15,000 labels), and small
# enough that the ids of a sample's responses fit one SQLite query (at most 32,766 variables).
MAX_SAMPLE_SIZE = 5_000


class ValidationSampleForm(forms.Form):
    size = forms.IntegerField(
        min_value=1,
        max_value=MAX_SAMPLE_SIZE,
        initial=DEFAULT_SAMPLE_SIZE,
        help_text="Pairs in the sample, spread equally over dimension x domain x contrast; "
        "all first draws when there are fewer. Growing a sample keeps the pairs it has.",
    )
    seed = forms.IntegerField(min_value=0, max_value=INT_FIELD_MAX, initial=0)
