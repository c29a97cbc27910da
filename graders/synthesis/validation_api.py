"""The API endpoint of `synthesis_validation --json`: the same document, for reviewers and
admins only (it names the cascade's judges and tells kept pairs from vetoed ones)."""

from django.http import Http404
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from graders.synthesis.validation_selectors import (
    SynthesisNotFound,
    synthesis_pick,
    synthesis_validation_json,
)
from labeling.access import Perm, project_access


@api_view(["GET"])
def validation_get(request: Request, slug: str, synthesis_id: str) -> Response:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    try:
        synthesis = synthesis_pick(project=access.project, external_id=synthesis_id)
    except SynthesisNotFound:
        raise Http404 from None
    return Response(synthesis_validation_json(synthesis=synthesis))
