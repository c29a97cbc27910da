"""Downloading a grader as a bundle (by id, or by alias for a trainer that follows one), and
importing one into a project."""

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.utils.http import parse_etags, quote_etag
from django.views.decorators.http import require_POST
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.request import Request
from rest_framework.response import Response

from graders.aliases import alias_resolve
from graders.bundles import BundleInvalid, bundle_export, bundle_import
from graders.models import Metagrader, TokenScope
from graders.tokens import ApiTokenAuthentication, TokenRateThrottle, scope_required
from labeling.access import Perm, project_access
from labeling.json_input import JsonTooDeep, json_parse

# A bundle carries every task's documents; a larger upload is refused before it is parsed.
BUNDLE_MAX_BYTES = 200 * 1024 * 1024


@require_POST
@login_required
def bundle_download(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    """The bundle as a file, recorded in the grader's lineage as an export. Only a POST (the
    page's Download button, with its CSRF token) is a download someone meant: a GET (a link
    prefetch, a crawler, a reload, a pasted URL) would inflate the lineage, so it is refused
    rather than served unrecorded, which would leave a hole in the lineage instead."""
    access = project_access(user=request.user, slug=slug, perm=Perm.EXPORT)
    grader = Metagrader.objects.filter(project=access.project, pk=grader_id).first()
    if grader is None:
        raise Http404
    try:
        bundle = bundle_export(metagrader=grader, user=request.user)
    except BundleInvalid as exc:
        messages.error(request, f"Cannot export: {exc}.")
        return redirect("program", slug=slug, grader_id=grader_id)
    response = JsonResponse(bundle, json_dumps_params={"ensure_ascii": False})
    response["Content-Disposition"] = (
        f'attachment; filename="{slug}-grader-{grader.pk}-{grader.content_hash[:12]}.json"'
    )
    return response


@require_POST
@login_required
def bundle_upload(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    upload = request.FILES.get("bundle")
    if upload is None:
        messages.error(request, "Choose a bundle file (.json) to import.")
        return redirect("graders", slug=slug)
    if upload.size is not None and upload.size > BUNDLE_MAX_BYTES:
        messages.error(request, f"The bundle is over {BUNDLE_MAX_BYTES // 2**20} MiB.")
        return redirect("graders", slug=slug)
    try:
        bundle = json_parse(upload.read())
        if not isinstance(bundle, dict):
            raise BundleInvalid("a bundle is a JSON object")
        grader = bundle_import(project=access.project, bundle=bundle, user=request.user)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        messages.error(request, f"The file is not JSON: {exc}.")
        return redirect("graders", slug=slug)
    except (BundleInvalid, JsonTooDeep) as exc:
        messages.error(request, f"Not imported: {exc}")
        return redirect("graders", slug=slug)
    messages.success(request, f"Imported {grader.name} (#{grader.pk}).")
    return redirect("program", slug=slug, grader_id=grader.pk)


@api_view(["GET"])
@authentication_classes([ApiTokenAuthentication])
@permission_classes([scope_required(TokenScope.EXPORT)])
@throttle_classes([TokenRateThrottle])
def bundle_api(request: Request, slug: str, grader_id: int) -> Response:
    """The bundle for a training job's own download, with a token holding the export scope;
    recorded in the grader's lineage under that token. A GET here is a download someone meant:
    only a job given an export token can make it (HEAD is refused, as for any API view that
    lists only GET, so a probe records nothing)."""
    grader = Metagrader.objects.filter(project__slug=slug, pk=grader_id).first()
    if grader is None:
        raise Http404("No such grader in this project.")
    return _bundle_answer(request, grader)


@api_view(["GET"])
@authentication_classes([ApiTokenAuthentication])
@permission_classes([scope_required(TokenScope.EXPORT)])
@throttle_classes([TokenRateThrottle])
def bundle_alias_api(request: Request, slug: str, name: str) -> Response:
    """The bundle of the version alias `name` points at, for a runtime that follows the alias
    (graders/engine/follow.py). Its strong ETag is the version's content hash, so the
    runtime's re-check is one request answered 304 Not Modified (nothing built, nothing
    recorded) until the alias moves; only a download that sends a bundle is an export."""
    grader = alias_resolve(project=request.auth.project, name=name)
    if grader is None:
        raise Http404(f"No alias {name[:60]!r} in this project.")
    etag = quote_etag(grader.content_hash)
    # If-None-Match compares weakly (RFC 9110 13.1.2): W/"x" matches "x".
    sent = [tag.removeprefix("W/") for tag in parse_etags(request.headers.get("If-None-Match", ""))]
    if etag in sent or "*" in sent:
        not_modified = Response(status=304)
        not_modified["ETag"] = etag
        return not_modified
    answer = _bundle_answer(request, grader)
    if answer.status_code == 200:
        answer["ETag"] = etag
    return answer


def _bundle_answer(request: Request, grader: Metagrader) -> Response:
    try:
        bundle = bundle_export(metagrader=grader, token=request.auth)
    except BundleInvalid as exc:
        return Response({"detail": f"Cannot export: {exc}."}, status=409)
    return Response(bundle)
