"""The lineage page (graders/lineage.py): from label snapshots to the next grader version.
Grader pages are for reviewers and admins only: experts never see what a grader scored."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from graders.lineage import project_lineage
from labeling.access import Perm, project_access


@require_GET
@login_required
def lineage_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    context = {
        "access": access,
        "project": access.project,
        "lineage": project_lineage(project=access.project),
    }
    return render(request, "graders/lineage.html", context)
