"""Reads for the program page: where a grader came from and where it went."""

from typing import Any

from graders.models import Candidate, GraderExport, GraderSelection, Metagrader, RewardUsage

# Programs are immutable, so a parent chain cannot loop; the bound guards hand edits.
MAX_ANCESTORS = 200


def program_lineage(grader: Metagrader) -> dict[str, Any]:
    """Its ancestors (root first) and children, the searches it stood in, the project's
    selection history for its kind, and its exports and reward API use."""
    ancestors: list[Metagrader] = []
    parent = grader.parent
    while parent is not None and len(ancestors) < MAX_ANCESTORS:
        ancestors.append(parent)
        parent = parent.parent
    selections = list(
        GraderSelection.objects.filter(project=grader.project, kind=grader.kind).select_related(
            "metagrader", "selected_by"
        )
    )
    current = selections[0] if selections else None
    return {
        "ancestors": ancestors[::-1],
        "children": grader.children.all(),
        "candidacies": Candidate.objects.filter(metagrader=grader).select_related("search"),
        "selections": selections,
        "current": current,
        "is_current": current is not None and current.metagrader_id == grader.pk,
        "exports": GraderExport.objects.filter(metagrader=grader).select_related(
            "user", "token", "snapshot"
        ),
        "reward_usage": RewardUsage.objects.filter(metagrader=grader).select_related("token"),
    }
