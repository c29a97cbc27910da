"""Downloads of a synthesis's kept pairs: chosen/rejected JSONL and the release's blind dataset
for anyone who may export (reviewers, admins); the release's answers, which hold the steering
text, for admins only."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from graders.synthesis.kept_pairs import (
    ANSWERS_FILE,
    BLIND_FILE,
    kept_pairs_records,
    release_documents,
)
from labeling.access import Perm, project_access
from labeling.jsonl import jsonl_lines
from labeling.models import Synthesis

RELEASE_FILES = {"blind": (BLIND_FILE, Perm.EXPORT), "answers": (ANSWERS_FILE, Perm.MANAGE)}


def _synthesis(request: HttpRequest, slug: str, perm: Perm) -> Synthesis:
    access = project_access(user=request.user, slug=slug, perm=perm)
    found = Synthesis.objects.filter(
        project=access.project, external_id=request.GET.get("synthesis", "")
    ).first()
    if found is None:
        raise Http404("No such synthesis in this project.")
    return found


@require_GET
@login_required
def kept_pairs_download(request: HttpRequest, slug: str) -> StreamingHttpResponse:
    synthesis = _synthesis(request, slug, Perm.EXPORT)
    response = StreamingHttpResponse(
        jsonl_lines(kept_pairs_records(synthesis=synthesis)), content_type="application/x-ndjson"
    )
    response["Content-Disposition"] = f'attachment; filename="{slug}-kept-pairs.jsonl"'
    return response


@require_GET
@login_required
def release_download(request: HttpRequest, slug: str, part: str) -> HttpResponse:
    if part not in RELEASE_FILES:
        raise Http404("No such release file.")
    name, perm = RELEASE_FILES[part]
    synthesis = _synthesis(request, slug, perm)
    text = release_documents(synthesis=synthesis)[name]
    response = HttpResponse(text, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
