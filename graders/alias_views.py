"""The grader page's aliases panel: promote a grader to an alias, roll an alias back. Only
admins (Perm.MANAGE) move aliases; both are POSTs from the panel's forms, with CSRF."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from graders.aliases import AliasInvalid, alias_promote, alias_rollback
from graders.models import Metagrader
from labeling.access import Perm, project_access

NOTE_MAX = 1000


@require_POST
@login_required
def alias_promote_view(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    grader = Metagrader.objects.filter(project=access.project, pk=grader_id).first()
    if grader is None:
        raise Http404
    name = request.POST.get("alias", "").strip()
    try:
        move = alias_promote(
            project=access.project,
            name=name,
            metagrader=grader,
            user=request.user,
            note=request.POST.get("note", "")[:NOTE_MAX],
        )
    except AliasInvalid as exc:
        messages.error(request, f"Not promoted: {exc}.")
    else:
        moved = f" (it pointed at #{move.from_metagrader_id})" if move.from_metagrader_id else ""
        messages.success(request, f"{name} now points at this grader{moved}.")
    return redirect("program", slug=slug, grader_id=grader.pk)


@require_POST
@login_required
def alias_rollback_view(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    """Roll back the alias named in the form; back to the grader page it was sent from."""
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    name = request.POST.get("alias", "")
    try:
        move = alias_rollback(
            project=access.project,
            name=name,
            user=request.user,
            note=request.POST.get("note", "")[:NOTE_MAX],
        )
    except AliasInvalid as exc:
        messages.error(request, f"Not rolled back: {exc}.")
    else:
        messages.success(
            request,
            f"{name} is back on #{move.to_metagrader_id} {move.to_metagrader.name} "
            f"(it pointed at #{move.from_metagrader_id}).",
        )
    return redirect("program", slug=slug, grader_id=grader_id)
