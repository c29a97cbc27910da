"""The project's API tokens page: admins make tokens for training jobs, see when each was last
used, and revoke them.

Making a token is post/redirect/get, so reloading the page never makes a second one: the POST
keeps the new secret in the (server-side) session and redirects, and the next GET of the page
takes it out of the session as it shows it, so it is shown exactly once."""

import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from graders.engine.programs import KINDS
from graders.models import ApiToken, TokenScope
from graders.services import grader_selected
from graders.tokens import MAX_RATE_PER_MINUTE, token_create, token_revoke
from labeling.access import Perm, project_access
from labeling.models import Project, Task

# Where a new token's secret waits, per project, between the POST and the GET that shows it.
NEW_SECRET_SESSION_KEY = "api-token-new-secret"


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="Who or what uses it, e.g. the training job's name."
    )
    scopes = forms.MultipleChoiceField(
        choices=TokenScope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[TokenScope.REWARD],
    )
    rate_per_minute = forms.IntegerField(
        min_value=1,
        max_value=MAX_RATE_PER_MINUTE,
        initial=600,
        label="Requests per minute",
        help_text="Requests over this get 429 with Retry-After.",
    )
    capture_rate = forms.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        label="Capture rate",
        help_text="Share of graded groups kept for labeling (docs/capture.md); empty: the "
        "project's rate, 0: none.",
    )


@require_http_methods(["GET", "POST"])
@login_required
def tokens_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    form = TokenForm(request.POST or None)
    secret_key = f"{NEW_SECRET_SESSION_KEY}:{access.project.pk}"
    if request.method == "POST" and form.is_valid():
        _, request.session[secret_key] = token_create(
            project=access.project,
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            rate_per_minute=form.cleaned_data["rate_per_minute"],
            capture_rate=form.cleaned_data["capture_rate"],
            user=request.user,
        )
        return redirect("api-tokens", slug=slug)
    secret = None if request.method == "POST" else request.session.pop(secret_key, None)
    selected = [
        (kind, request.build_absolute_uri(reverse("api-reward-selected", args=[slug, kind])))
        for kind in KINDS
        if grader_selected(project=access.project, kind=kind) is not None
    ]
    context = {
        "access": access,
        "project": access.project,
        "tokens": ApiToken.objects.filter(project=access.project).select_related("created_by"),
        "form": form,
        "secret": secret,
        "selected": selected,
        "schema_url": request.build_absolute_uri(reverse("api-schema")),
        # A task of the project, so the example call works as pasted (as JSON: ids are free text).
        "example_task": json.dumps(_task_example(access.project)),
    }
    response = render(request, "graders/tokens.html", context, status=400 if form.errors else 200)
    # The page may carry a secret: no cache, proxy or back button keeps a copy.
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@login_required
def token_revoke_view(request: HttpRequest, slug: str, token_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    token = ApiToken.objects.filter(project=access.project, pk=token_id).first()
    if token is None:
        raise Http404
    token_revoke(token=token)
    messages.success(request, f"Token {token.name} ({token.prefix}) revoked.")
    return redirect("api-tokens", slug=slug)


def _task_example(project: Project) -> str:
    tasks = Task.objects.filter(project=project).order_by("pk")
    return tasks.values_list("external_id", flat=True).first() or "t1"


@require_http_methods(["GET"])
@login_required
def api_docs_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The reward API's reference, rendered in the browser by Swagger UI (served from the
    drf-spectacular-sidecar package, never a CDN) from the schema the API itself serves."""
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    return render(
        request,
        "graders/api_docs.html",
        {"project": access.project, "access": access, "schema_url": reverse("api-schema")},
    )
