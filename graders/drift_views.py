"""The drift page of a promoted grader: its accuracy on fresh expert labels against its
accuracy at selection (graders/drift.py). Grader pages are for reviewers and admins only:
experts never see what a grader scored."""

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from graders.charts import drift_svg
from graders.drift import (
    DEFAULT_STEP_BUCKET,
    DEFAULT_WINDOW_DAYS,
    drift_report,
    report_warnings,
)
from graders.models import Metagrader
from labeling.access import Perm, project_access


class DriftForm(forms.Form):
    window_days = forms.FloatField(min_value=0.01, required=False, label="Window (days)")
    step_bucket = forms.IntegerField(min_value=1, required=False, label="Step bucket")


@require_GET
@login_required
def drift_page(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    grader = Metagrader.objects.filter(project=access.project, pk=grader_id).first()
    if grader is None:
        raise Http404
    form = DriftForm(request.GET)
    chosen = form.cleaned_data if form.is_valid() else {}
    report = drift_report(
        grader=grader,
        window_days=chosen.get("window_days") or DEFAULT_WINDOW_DAYS,
        step_bucket=chosen.get("step_bucket") or DEFAULT_STEP_BUCKET,
    )
    selection = report["selection"]["accuracy"]
    context = {
        "access": access,
        "project": access.project,
        "grader": grader,
        "can_manage": access.can(Perm.MANAGE),
        "form": form,
        "report": report,
        "warnings": report_warnings(report),
        "chart": drift_svg(report["buckets"], selection=selection["value"] if selection else None)
        if report["buckets"]
        else None,
    }
    return render(request, "graders/drift.html", context)
