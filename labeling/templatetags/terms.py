"""Plain words for the paper's and the code's names. `{{ name|term }}` shows the plain label
with the exact name as its hint (<abbr title>, shown on hover), so a reader who knows the
paper still finds its term; a name this module does not know (the plain words already:
"selection", "pairwise") is shown as it is, escaped."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

TERMS = {
    # The task sets of a search (DESIGN.md, "Search").
    "D_meta": "proposer's examples",
    "D_selection": "selection tasks",
    "D_eval": "held-out tasks",
    # The splits that hold them.
    "meta": "proposer's examples",
    "eval": "held-out evaluation",
    "train": "training",
    "unassigned": "not in a split",
    # Agreement references (labeling/agreement_stats.py).
    "human_majority": "majority of the experts",
    "human_majority_without_self": "majority of the other experts",
    # Grader program kinds (graders/engine/programs.py).
    "scalar": "single score",
    "pairwise_rubric": "pairwise, with a rubric",
    # Who made a score or a label.
    "true_grader": "true grader",
    "synthetic": "synthetic (generated)",
}


@register.filter
def term(name: object) -> SafeString:
    text = str(name)
    label = TERMS.get(text)
    if label is None:
        return format_html("{}", text)
    return format_html('<abbr class="term" title="{}">{}</abbr>', text, label)
