"""Every page, screenshot at 1440 and 420 px wide in light and dark mode, as the role that may
see it: the page body never scrolls sideways, and no page logs a console error (a CSP
violation is one: an inline style or script the policy refuses, or a missing static file).

The project is the demo (its tasks, responses, queue, rubrics, graders and synthesis) plus the
rows a finished search, grading run, audit, synthesis run and sweep leave. Every named URL
pattern is either visited or listed in NOT_PAGES with the reason; a new pattern whose only
argument is the project's slug is visited as an admin without being listed.
Set WORKBENCH_SCREENSHOTS=DIR to keep the screenshots (var/screenshots, say)."""

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from config.login_throttle import login_failure_record
from graders.engine.baseline import baseline_program
from graders.models import (
    Candidate,
    Grade,
    GradingRun,
    JudgeEndpoint,
    SearchRun,
    SynthesisRun,
    SynthesisSweep,
)
from graders.services import baselines_ensure, local_demo_endpoint_ensure, metagrader_register
from graders.tokens import token_create
from labeling.demo import demo_load, demo_synthesis_load
from labeling.jobs import job_create
from labeling.models import (
    Dimension,
    Job,
    JobStatus,
    Project,
    Response,
    Rubric,
    RubricItem,
    Synthesis,
    Task,
)
from reviews.demo import demo_rubrics_load
from reviews.models import AuditRun, AuditVerdict

WIDTHS = (1440, 420)
SCHEMES = ("light", "dark")

# Named URL patterns that are not pages a person opens: actions (POST only), htmx fragments
# of a page visited here, downloads, the JSON API, and Django's own admin.
NOT_PAGES = {
    **dict.fromkeys(
        ("label-submit", "queue-strategy", "queue-refresh", "grade-submit", "job-cancel",
         "judge-default", "judge-delete", "program-promote", "alias-promote", "alias-rollback",
         "grader-research", "grading-run-resume", "search-cancel", "search-resume",
         "search-label-next", "candidate-evaluate", "candidate-promote", "synthesis-run-cancel",
         "synthesis-run-resume", "synthesis-harness-import", "synthesis-validation-sample",
         "synthesis-sweep-resume", "rubric-generate", "rubric-item-save", "rubric-item-delete",
         "rubric-item-move", "rubric-restore", "rubric-recheck", "audit-cancel", "audit-resume",
         "api-token-revoke", "logout", "bundle-import", "notifications-read", "label-skip",
         "label-flag", "flag-resolve", "project-dimension-add", "project-dimension-update",
         "project-member-add", "project-member-update"),
        "an action: POST only, it redirects or answers a fragment",
    ),
    **dict.fromkeys(
        ("label-revise", "rubric-item-edit", "rubric-item-row", "rubric-recheck-status",
         "notifications-badge"),
        "an htmx fragment of a page visited here (label, rubric review, the top bar)",
    ),
    **dict.fromkeys(
        ("export", "import-sample", "bundle-download", "synthesis-harness-jobs",
         "synthesis-kept-pairs", "synthesis-release"),
        "a file download, not a page",
    ),
}  # fmt: skip


@dataclass
class Seeded:
    project: Project
    users: dict[str, User]
    objects: dict[str, Any]


@dataclass(frozen=True)
class Visit:
    name: str  # the URL pattern's name, or a label for a page without one
    role: str | None  # None: logged out
    path: str


def _finished_job(project: Project, kind: str, user: User) -> Job:
    job = job_create(kind=kind, project=project, user=user)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, done=4, total=4)
    job.refresh_from_db()
    return job


def _metric(value: float) -> dict[str, Any]:
    return {"value": value, "ci": [round(value - 0.1, 3), round(value + 0.05, 3)]}


def _evaluation(value: float) -> dict[str, Any]:
    return {
        "reference": "human_majority",
        "pairs": 12,
        "tasks": 3,
        "graded": 12,
        "failed": 0,
        "tolerance": 0.1,
        "tolerant_ranking_accuracy": _metric(value),
        "ranking_accuracy": _metric(value - 0.05),
        "within_task_spearman": _metric(value - 0.1),
    }


def _search(project: Project, endpoint: JudgeEndpoint, admin: User) -> dict[str, Any]:
    """A finished best-of-N search with two graded candidates, the better one evaluated."""
    search = SearchRun.objects.create(
        project=project, job=_finished_job(project, "search", admin), kind="scalar",
        mode="best_of_n", endpoint=endpoint, n=2, usage={"calls": 24, "cost": 0.1},
    )  # fmt: skip
    candidates = []
    for position, (name, score) in enumerate((("plain judge", 0.62), ("checks the sources", 0.74))):
        program = baseline_program("scalar").to_json() | {"name": name}
        program["steps"][0]["prompt"] += f"\n{name}"
        grader = metagrader_register(project=project, program=program, origin="search")
        run = GradingRun.objects.create(
            project=project, metagrader=grader, endpoint=endpoint, split="selection",
            job=_finished_job(project, "grading", admin), search=search,
            evaluation=_evaluation(score),
        )  # fmt: skip
        candidate = Candidate.objects.create(
            search=search, metagrader=grader, iteration=0, position=position, status="graded",
            score=score,
            calls_per_response=1.0, lineage="mutation of the baseline", selection_run=run,
        )  # fmt: skip
        candidates.append(candidate)
    winner = candidates[-1]
    winner.eval_run = GradingRun.objects.create(
        project=project, metagrader=winner.metagrader, endpoint=endpoint, split="eval",
        job=_finished_job(project, "grading", admin), search=search, evaluation=_evaluation(0.7),
    )  # fmt: skip
    winner.save(update_fields=["eval_run"])
    search.winner = winner
    search.curve = [
        {"iteration": 0, "candidate": winner.pk, "name": "checks the sources", "selection": 0.74,
         "selection_ci": [0.64, 0.79], "eval": 0.7, "eval_ci": [0.6, 0.75], "candidates": 2},
    ]  # fmt: skip
    search.save(update_fields=["winner", "curve"])
    run = winner.selection_run
    assert run is not None and winner.metagrader is not None
    response = Response.objects.filter(task__project=project).first()
    grade = Grade.objects.create(
        run=run, response=response, reward=0.7,
        trace=[{"step_id": "score", "messages": [{"role": "user", "content": "Score this."}],
                "text": '{"score": 0.7}', "parsed": {"score": 0.7}, "tokens_in": 120,
                "tokens_out": 8, "latency_s": 0.4}],
    )  # fmt: skip
    # More rewards from the grader, on the tasks' own splits and one failed, for its page's
    # reward distribution.
    others = Response.objects.filter(task__project=project).exclude(pk=grade.response_id)
    for index, other in enumerate(others.order_by("pk")[:12]):
        Grade.objects.create(
            run=winner.eval_run, response=other, reward=None if index == 0 else index / 12,
            error="the judge's answer was not JSON" if index == 0 else "",
        )  # fmt: skip
    return {
        "search": search,
        "candidate": winner,
        "run": run,
        "grade": grade,
        "grader": winner.metagrader,
    }


def _audit(project: Project, endpoint: JudgeEndpoint, admin: User) -> dict[str, Any]:
    rubric = Rubric.objects.filter(task__project=project).select_related("task").first()
    assert rubric is not None, "the demo has rubrics"
    item = RubricItem.objects.filter(rubric=rubric).first()
    audit = AuditRun.objects.create(
        project=project, job=_finished_job(project, "audit", admin), endpoint=endpoint,
        split="eval",
    )  # fmt: skip
    audit.tasks.set([rubric.task])
    verdict = AuditVerdict.objects.create(
        run=audit, task=rubric.task, author_kind=rubric.author_kind, rubric_item=item,
        criterion_text=item.text if item else "States the cap.", specificity="specific",
        grounding="unverifiable", quote="capped at 10%", quote_missing=True, omission=False,
        trace={"messages": [{"role": "user", "content": "Audit this."}], "text": "{}",
               "parsed": {"grounding": "unverifiable"}, "cached": False},
    )  # fmt: skip
    return {"audit": audit, "verdict": verdict, "rubric_task": rubric.task}


def _synthesis(project: Project, endpoint: JudgeEndpoint, admin: User) -> dict[str, Any]:
    # The demo synthesis was imported; a run stands in as the one that made it, so the run
    # page and the funnel show its cells.
    demo = Synthesis.objects.get(project=project)
    run = SynthesisRun.objects.create(
        project=project, synthesis=demo, job=_finished_job(project, "synthesis", admin),
        writer=endpoint, created_by=admin,
    )  # fmt: skip
    run.agents.set([endpoint])
    run.dimensions.set(list(Dimension.objects.filter(project=project)[:1]))
    sweep = SynthesisSweep.objects.create(
        project=project, synthesis=demo, job=_finished_job(project, "synthesis_sweep", admin),
        evaluators=[{"name": "local-demo", "endpoint": endpoint.pk, "metagrader": None}],
    )  # fmt: skip
    return {"synthesis": demo, "synthesis_run": run, "sweep": sweep}


def seed(django_settings: Any) -> Seeded:
    django_settings.DEBUG = True  # the demo loads only with DEBUG on (its password is public)
    project, _ = demo_load()
    django_settings.DEBUG = False
    baselines_ensure(project=project)
    demo_rubrics_load(project=project)
    demo_synthesis_load(project=project)
    endpoint = local_demo_endpoint_ensure(project=project, base_url="http://127.0.0.1:9/v1")
    users = {user.username: user for user in User.objects.filter(membership__project=project)}
    admin = users["admin"]
    User.objects.filter(pk=admin.pk).update(is_staff=True)  # the menu's Django admin entry
    token_create(project=project, name="trainer", scopes=["reward"], user=admin)
    objects: dict[str, Any] = {"endpoint": endpoint, "job": _finished_job(project, "import", admin)}
    objects |= _search(project, endpoint, admin)
    objects |= _audit(project, endpoint, admin)
    objects |= _synthesis(project, endpoint, admin)
    objects["task"] = Task.objects.filter(project=project).order_by("external_id").first()
    return Seeded(project, users, objects)


def _named_patterns(
    patterns: list[URLPattern | URLResolver] | None = None, namespace: str = "", route: str = ""
) -> Iterator[tuple[str, URLPattern, str]]:
    """(name with its namespace, pattern, the route from the site's root) of every named URL."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        here = route + str(entry.pattern)
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _named_patterns(entry.url_patterns, inner, here)
        elif entry.name:
            yield f"{namespace}{entry.name}", entry, here


def _skip_reason(name: str, route: str) -> str | None:
    if name in NOT_PAGES:
        return NOT_PAGES[name]
    if route.startswith("api/"):
        return "the JSON API (its reference is the api-docs page, visited here)"
    if name.startswith("admin:"):
        return "Django's own admin, styled by Django"
    return None


def visits(seeded: Seeded) -> list[Visit]:
    """Every page with its arguments from the seeded rows, as the role the page is for."""
    o, slug = seeded.objects, seeded.project.slug
    # name -> (role, arguments after the slug, or None for a page without one)
    known: dict[str, tuple[str | None, Callable[[], list[Any]] | None]] = {
        "login": (None, None),
        "project-list": ("admin", None),
        "project-overview": ("admin", lambda: []),
        "task-list": ("admin", lambda: []),
        "task-detail": ("admin", lambda: [o["task"].external_id]),
        "import": ("admin", lambda: []),
        "splits": ("admin", lambda: []),
        "label": ("expert", lambda: []),
        "grade": ("expert", lambda: []),
        "queue": ("admin", lambda: []),
        "agreement": ("reviewer", lambda: []),
        "annotators": ("admin", lambda: []),
        "job-detail": ("admin", None),
        "judges": ("admin", lambda: []),
        "judge-edit": ("admin", lambda: [o["endpoint"].pk]),
        "graders": ("admin", lambda: []),
        "lineage": ("reviewer", lambda: []),
        "program": ("admin", lambda: [o["grader"].pk]),
        "drift": ("reviewer", lambda: [o["grader"].pk]),
        "grading-run": ("reviewer", lambda: [o["run"].pk]),
        "grade-trace": ("reviewer", lambda: [o["grade"].pk]),
        "meta-eval": ("reviewer", lambda: []),
        "searches": ("admin", lambda: []),
        "search": ("admin", lambda: [o["search"].pk]),
        "search-candidate": ("reviewer", lambda: [o["search"].pk, o["candidate"].pk]),
        "synthesis-runs": ("admin", lambda: []),
        "synthesis-run": ("admin", lambda: [o["synthesis_run"].pk]),
        "synthesis-validation": ("admin", lambda: [o["synthesis"].pk]),
        "synthesis-sweeps": ("admin", lambda: []),
        "synthesis-sweep": ("reviewer", lambda: [o["sweep"].pk]),
        "synthesis-funnel": ("reviewer", lambda: []),
        "rubric-list": ("admin", lambda: []),
        "rubric-review": ("reviewer", lambda: [o["rubric_task"].external_id]),
        "audits": ("admin", lambda: []),
        "audit": ("reviewer", lambda: [o["audit"].pk]),
        "audit-verdict": ("reviewer", lambda: [o["audit"].pk, o["verdict"].pk]),
        "api-tokens": ("admin", lambda: []),
        "api-docs": ("admin", lambda: []),
    }
    found: list[Visit] = []
    unlisted = []
    for name, pattern, route in _named_patterns():
        if _skip_reason(name, route) is not None:
            continue
        if name == "job-detail":
            found.append(Visit(name, "admin", reverse(name, args=[o["job"].pk])))
            continue
        if name not in known:
            arguments = set(pattern.pattern.converters)
            if arguments <= {"slug"}:  # a new page of the project, or of the site
                found.append(Visit(name, "admin", reverse(name, args=[slug] if arguments else [])))
            else:
                unlisted.append(name)
            continue
        role, extra = known[name]
        found.append(
            Visit(name, role, reverse(name, args=None if extra is None else [slug, *extra()]))
        )
    assert not unlisted, f"URL patterns neither visited nor in NOT_PAGES: {unlisted}"
    # Each role's own view of the project's home (its menu shows only that role's sections),
    # and the page a wrong address gets.
    overview = reverse("project-overview", args=[slug])
    found += [
        Visit("project-overview", "expert", overview),
        Visit("project-overview", "reviewer", overview),
    ]
    found.append(Visit("not-found", "admin", f"/p/{slug}/no-such-page/"))
    # The page a locked-out login gets (config/login_throttle.py): reached from the login page.
    found.append(Visit("locked-out", None, reverse("login")))
    return found


LOCKED_USER = "locked-out-user"


def _log_in_while_locked_out(page: Any) -> int | None:
    """Lock LOCKED_USER out as repeated wrong passwords would, then log in as them from the
    login page: the answer is the locked-out page. Its HTTP status."""
    for _ in range(settings.LOGIN_FAILURES_PER_USERNAME):
        login_failure_record(request=None, username=LOCKED_USER)
    page.get_by_label("Username").fill(LOCKED_USER)
    page.get_by_label("Password").fill("any password")
    with page.expect_response(lambda answer: answer.request.method == "POST") as posted:
        page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state("load")
    return posted.value.status


def _page_for(browser: Any, live_server: Any, user: User | None) -> Any:
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
        )
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.problems = []
    page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
    page.on("pageerror", lambda e: page.problems.append(f"uncaught: {e}"))
    return page


def _screens_dir(tmp_path: Path) -> Path:
    chosen = os.environ.get("WORKBENCH_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


OVERFLOW = "() => [document.documentElement.scrollWidth, window.innerWidth]"


@pytest.mark.django_db(transaction=True)
def test_every_page_fits_at_1440_and_420_in_light_and_dark(
    browser: Any, live_server: Any, settings: Any, tmp_path: Path
) -> None:
    seeded = seed(settings)
    folder = _screens_dir(tmp_path)
    pages: dict[str | None, Any] = {}
    problems: list[str] = []
    shots = 0
    planned = visits(seeded)
    for visit in planned:
        if visit.role not in pages:
            pages[visit.role] = _page_for(browser, live_server, seeded.users.get(visit.role or ""))
        page = pages[visit.role]
        page.set_viewport_size({"width": WIDTHS[0], "height": 900})
        page.emulate_media(color_scheme=SCHEMES[0])
        answer = page.goto(live_server.url + visit.path, wait_until="load")
        expected = 404 if visit.name == "not-found" else 200
        if answer is None or answer.status != expected:
            problems.append(f"{visit.path} as {visit.role}: HTTP {answer and answer.status}")
            continue
        if visit.name == "label":  # past the guidelines to the pair, as a labeler works
            page.get_by_role("button", name="Start").click()
            page.locator(".sides").wait_for()
        if visit.name == "locked-out":
            status = _log_in_while_locked_out(page)
            heading = page.get_by_role("heading", name="Too many failed logins")
            if status != 429 or heading.count() != 1:
                problems.append(f"logging in while locked out: HTTP {status}")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for scheme in SCHEMES:
                page.emulate_media(color_scheme=scheme)
                scroll_width, inner_width = page.evaluate(OVERFLOW)
                if scroll_width > inner_width:
                    problems.append(
                        f"{visit.path} as {visit.role} at {width} px, {scheme}: the page is "
                        f"{scroll_width} px wide"
                    )
                name = f"{visit.name}-{visit.role or 'anonymous'}-{width}-{scheme}.png"
                page.screenshot(path=str(folder / name), full_page=True)
                shots += 1
        # The page's own status (404, 429) is logged as a failed load.
        if visit.name in ("not-found", "locked-out"):
            code = "404" if visit.name == "not-found" else "429"
            page.problems = [text for text in page.problems if f"status of {code}" not in text]
        problems += [f"{visit.path} as {visit.role}: {text}" for text in page.problems]
        page.problems.clear()
    for page in pages.values():
        page.context.close()
    assert not problems, "\n".join(problems)
    assert shots == len(WIDTHS) * len(SCHEMES) * len(planned)
