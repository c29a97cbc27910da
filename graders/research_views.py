"""The re-search button's view: a manager starts a re-search of a grader (from its drift
alert) and lands on the new search's page."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from graders.models import Metagrader
from graders.research import ResearchInvalid, research_start
from graders.search import SearchInvalid
from labeling.access import Perm, project_access


@require_POST
@login_required
def grader_research(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    grader = Metagrader.objects.filter(project=access.project, pk=grader_id).first()
    if grader is None:
        raise Http404
    try:
        search = research_start(project=access.project, grader=grader, user=request.user)
    except (ResearchInvalid, SearchInvalid) as exc:
        messages.error(request, f"Cannot re-search {grader.name}: {exc}.")
        return redirect("program", slug=slug, grader_id=grader.pk)
    note = f" ({search.warm_start_note})" if search.warm_start_note else ""
    messages.success(
        request,
        f"Re-search started on the current labels, warm-started from {grader.name}{note}.",
    )
    return redirect("search", slug=slug, search_id=search.pk)
