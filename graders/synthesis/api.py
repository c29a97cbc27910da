"""The funnel over the session API: the same document as `synthesis_funnel --json`."""

from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from graders.synthesis.funnel_selectors import (
    SynthesisChoiceError,
    synthesis_choose,
    synthesis_funnel_json,
)
from labeling.access import Perm, project_access


@api_view(["GET"])
def synthesis_funnel_get(request: Request, slug: str) -> Response:
    """GET ?synthesis=ID (optional when the project has one synthesis); 400 with the reason
    when none matches. Reviewers and admins, as on the page."""
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    try:
        synthesis = synthesis_choose(
            project=access.project, external_id=request.query_params.get("synthesis")
        )
    except SynthesisChoiceError as exc:
        return Response({"detail": str(exc).replace("--synthesis", "?synthesis=")},
                        status=status.HTTP_400_BAD_REQUEST)  # fmt: skip
    return Response(synthesis_funnel_json(synthesis=synthesis))
