"""The validation page of a synthesis (PADME section 5.2, Table 2): admins take the sample,
reviewers and admins read the report. Experts never reach it: the page names judges and the
sample's strata, which labeling must not show."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from graders.charts import depth_accuracy_svg
from graders.synthesis.validation_forms import ValidationSampleForm
from graders.synthesis.validation_selectors import synthesis_validation_view
from graders.synthesis.validation_services import SampleRefused, synthesis_validation_sample
from labeling.access import Perm, ProjectAccess, project_access
from labeling.demo import demo_synthesis_note
from labeling.models import Synthesis


def _render(
    request: HttpRequest,
    access: ProjectAccess,
    synthesis: Synthesis,
    form: ValidationSampleForm | None,
    status: int = 200,
) -> HttpResponse:
    view = synthesis_validation_view(synthesis=synthesis)
    judged = any(row["accuracy"] is not None for row in view["depths"])
    context = {
        "access": access,
        "project": access.project,
        "synthesis": synthesis,
        "note": demo_synthesis_note(synthesis),
        "form": form,
        "chart": depth_accuracy_svg(view["depths"]) if judged else "",
        **view,
    }
    return render(request, "graders/synthesis_validation.html", context, status=status)


@require_GET
@login_required
def validation_page(request: HttpRequest, slug: str, synthesis_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    synthesis = get_object_or_404(Synthesis, project=access.project, pk=synthesis_id)
    form = ValidationSampleForm() if access.can(Perm.MANAGE) else None
    return _render(request, access, synthesis, form)


@require_POST
@login_required
def validation_sample(request: HttpRequest, slug: str, synthesis_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    synthesis = get_object_or_404(Synthesis, project=access.project, pk=synthesis_id)
    form = ValidationSampleForm(request.POST)
    if not form.is_valid():
        return _render(request, access, synthesis, form, status=400)
    try:
        result = synthesis_validation_sample(synthesis=synthesis, **form.cleaned_data)
    except SampleRefused as exc:
        form.add_error(None, str(exc))
        return _render(request, access, synthesis, form, status=400)
    messages.success(
        request,
        f"Sample: {result.sampled} of {result.eligible} first draws ({result.added} new), "
        "queued for three labels each.",
    )
    return redirect("synthesis-validation", slug=slug, synthesis_id=synthesis.pk)
