"""Plain words for the paper's names, with the name kept in a hint; anything else as it is."""

from django.template import Context, Template


def _render(source: str, **context: object) -> str:
    return Template("{% load terms %}" + source).render(Context(context))


def test_a_known_name_reads_plainly_with_the_name_in_its_hint() -> None:
    html = _render("{{ name|term }}", name="human_majority_without_self")
    assert (
        html
        == '<abbr class="term" title="human_majority_without_self">majority of the other experts</abbr>'
    )
    assert (
        _render('{{ "D_selection"|term }}')
        == '<abbr class="term" title="D_selection">selection tasks</abbr>'
    )
    assert _render("{{ name|term }}", name="pairwise_rubric").endswith(
        ">pairwise, with a rubric</abbr>"
    )


def test_other_names_are_shown_as_they_are_and_escaped() -> None:
    assert _render("{{ name|term }}", name="pairwise") == "pairwise"  # the plain word already
    assert _render("{{ name|term }}", name="<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
