"""The rubric review pages: who may see them, the page and its fragments, escaping of hostile
text, edits answering 422 with the typed text and 409 with the current one, the list of
generated rubrics and the generation form."""

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.grading import grading_run_execute
from graders.models import JudgeEndpoint, Metagrader
from labeling.imports import jsonl_import
from labeling.models import Job, Project, Rubric
from reviews.rubric_generation import rubric_generation_execute
from reviews.rubric_recheck import recheck_start
from tests.labeling.helpers import write_jsonl
from tests.reviews.conftest import CAP, CLAUSE, CLAUSE_FIXED, expert_marks, generate, review_records

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
HOSTILE = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"


def login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def review_url(task: str = "t0") -> str:
    return reverse("rubric-review", args=["acme", task])


def post(client: Client, view: str, rubric: Rubric, **data: Any) -> Any:
    return client.post(reverse(view, args=["acme", rubric.pk]), data, headers=HTMX)


def save(client: Client, rubric: Rubric, **data: Any) -> Any:
    return post(client, "rubric-item-save", rubric, **data)


def delete(client: Client, rubric: Rubric, key: str, version: int) -> Any:
    return post(client, "rubric-item-delete", rubric, key=key, version=version)


def restore(client: Client, rubric: Rubric, version: int) -> Any:
    return post(client, "rubric-restore", rubric, version=version, restore=1)


def test_outsiders_get_404_and_experts_403_everywhere(
    generated: Rubric, outsider: User, expert_user: User, reviewer_user: User
) -> None:
    rubric_urls = [
        ("get", reverse("rubric-list", args=["acme"]), {}),
        ("get", review_url(), {}),
        ("get", reverse("rubric-item-edit", args=["acme", generated.pk]) + "?key=c1", {}),
        ("get", reverse("rubric-recheck-status", args=["acme", generated.pk]), {}),
        ("post", reverse("rubric-item-save", args=["acme", generated.pk]),
         {"key": "c1", "version": 1, "text": "Mine now.", "weight": 1}),
        ("post", reverse("rubric-item-delete", args=["acme", generated.pk]), {"key": "c1", "version": 1}),
        ("post", reverse("rubric-restore", args=["acme", generated.pk]), {"version": 1, "restore": 1}),
        ("post", reverse("rubric-recheck", args=["acme", generated.pk]), {}),
        ("post", reverse("rubric-generate", args=["acme"]), {"split": "eval"}),
    ]  # fmt: skip
    for user, status in ((outsider, 404), (expert_user, 403)):
        client = login(user)
        for method, url, data in rubric_urls:
            assert getattr(client, method)(url, data).status_code == status, (user, url)
    generated.refresh_from_db()
    assert generated.version == 1 and not Job.objects.exclude(kind="rubric_generation").exists()
    assert login(reviewer_user).get(review_url()).status_code == 200


def test_the_review_page_shows_task_rubrics_side_by_side_and_blind_responses(
    generated: Rubric, reviewer_user: User
) -> None:
    page = login(reviewer_user).get(review_url()).content.decode()
    assert "Summarise the risk in deal t0." in page and "<strong>10%</strong>" in page
    assert CAP in page and CLAUSE in page and "Mentions the 10% cap." in page  # both rubrics
    assert "GOOD answer for t0." in page and "Response 3" in page
    assert "secret-model" not in page  # neither the source model nor the response ids
    assert 'data-state="none"' in page and "Grade this task again" in page


def test_hostile_text_is_escaped(
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    reviewer_user: User,
    tmp_path: Path,
) -> None:
    records = review_records([("evil", "eval", "legal")], hostile=HOSTILE)
    records[0]["prompt"] = HOSTILE
    records[0]["documents"][0]["text"] = f"{HOSTILE} [x](javascript:alert(2))"
    jsonl_import(project=review_project, path=write_jsonl(tmp_path / "evil.jsonl", records))
    generate(review_project, ["evil"])
    rubric = Rubric.objects.get(task__external_id="evil", author_kind="generated")
    client = login(reviewer_user)
    assert save(client, rubric, key="c1", version=1, text=HOSTILE, weight=1).status_code == 200
    page = client.get(review_url("evil")).content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert 'href="javascript:' not in page  # markdown's link stays text
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    edit = client.get(
        reverse("rubric-item-edit", args=["acme", rubric.pk]) + "?key=c1", headers=HTMX
    ).content.decode()
    assert "<script>alert" not in edit and "&lt;script&gt;" in edit


def test_edit_cycle_fragments_and_full_page_fallbacks(
    generated: Rubric, reviewer_user: User
) -> None:
    client = login(reviewer_user)
    edit_url = reverse("rubric-item-edit", args=["acme", generated.pk]) + "?key=c2"
    fragment = client.get(edit_url, headers=HTMX)
    html = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in html and "data-criterion-form" in html
    assert CLAUSE in html and 'name="version" value="1"' in html
    # Without htmx the edit link is a page with that criterion's form open.
    assert client.get(edit_url)["Location"] == review_url() + "?edit=c2"
    full = client.get(review_url() + "?edit=c2").content.decode()
    assert "<html" in full and "data-criterion-form" in full
    row = client.get(
        reverse("rubric-item-row", args=["acme", generated.pk]) + "?key=c2", headers=HTMX
    )
    assert row.status_code == 200 and "data-edit" in row.content.decode()
    saved = save(client, generated, key="c2", version=1, text=CLAUSE_FIXED, weight=2)
    assert saved.status_code == 200 and saved["HX-Retarget"] == "#rubric-panel"
    body = saved.content.decode()
    assert 'id="rubric-panel"' in body and 'id="history" hx-swap-oob="true"' in body
    assert 'name="version" value="2"' in body and CLAUSE_FIXED in body
    plain = client.post(
        reverse("rubric-item-move", args=["acme", generated.pk]),
        {"key": "c2", "version": 2, "direction": "up"},
    )
    assert plain.status_code == 302 and plain["Location"] == review_url()
    generated.refresh_from_db()
    assert list(generated.items.values_list("key", flat=True)) == ["c2", "c1"]
    refused = client.post(
        reverse("rubric-item-save", args=["acme", generated.pk]),
        {"key": "c1", "version": 3, "text": "", "weight": 1},
    )
    html = refused.content.decode()
    assert refused.status_code == 422 and "<html" in html and "cannot be empty" in html
    recheck = client.post(reverse("rubric-recheck", args=["acme", generated.pk]))
    assert recheck.status_code == 302 and recheck["Location"] == review_url() + "#recheck"


def test_invalid_edits_answer_422_in_place_with_the_typed_text(
    generated: Rubric, reviewer_user: User
) -> None:
    client = login(reviewer_user)
    empty = save(client, generated, key="c1", version=1, text="   ", weight="2.5")
    html = empty.content.decode()
    assert empty.status_code == 422 and "cannot be empty" in html and 'value="2.5"' in html
    assert 'aria-invalid="true"' in html and "<html" not in html
    long_text = "Too long. " * 501
    too_long = save(client, generated, key="c1", version=1, text=long_text, weight=0)
    html = too_long.content.decode()
    assert too_long.status_code == 422 and "this one has 5,009" in html
    assert "greater than 0" in html and long_text in html
    nonsense = save(client, generated, key="c1", version=1, text="Fine.", weight="heavy")
    assert nonsense.status_code == 422 and "Enter a number" in nonsense.content.decode()
    generated.refresh_from_db()
    assert generated.version == 1 and generated.items.get(key="c1").text == CAP


def test_two_reviewers_saving_one_criterion_the_second_gets_409_with_the_current_text(
    generated: Rubric, reviewer_user: User, admin_user: User
) -> None:
    rob, ada = login(reviewer_user), login(admin_user)
    for client in (rob, ada):  # both open the form on version 1
        assert (
            'value="1"'
            in client.get(
                reverse("rubric-item-edit", args=["acme", generated.pk]) + "?key=c2", headers=HTMX
            ).content.decode()
        )
    assert (
        save(rob, generated, key="c2", version=1, text="Rob's wording.", weight=1).status_code
        == 200
    )
    refused = save(ada, generated, key="c2", version=1, text="Ada's wording.", weight=1)
    html = refused.content.decode()
    assert refused.status_code == 409 and "Not saved." in html
    assert "Rob&#x27;s wording." in html  # the current text, to read before deciding
    assert "Ada&#x27;s wording." in html  # her own text, kept in the form
    assert 'name="version" value="2"' in html  # saving again is a deliberate replace
    generated.refresh_from_db()
    assert generated.version == 2 and generated.items.get(key="c2").text == "Rob's wording."
    stale_move = ada.post(
        reverse("rubric-item-move", args=["acme", generated.pk]),
        {"key": "c1", "version": 1, "direction": "down"},
        headers=HTMX,
    )
    assert stale_move.status_code == 409 and "Nothing was changed" in stale_move.content.decode()
    assert (
        save(ada, generated, key="c2", version=2, text="Ada's wording.", weight=1).status_code
        == 200
    )
    generated.refresh_from_db()
    assert generated.version == 3 and generated.items.get(key="c2").text == "Ada's wording."


def test_delete_add_and_restore_through_the_page(generated: Rubric, reviewer_user: User) -> None:
    client = login(reviewer_user)
    assert delete(client, generated, key="c1", version=1).status_code == 200
    last = delete(client, generated, key="c2", version=2)
    assert last.status_code == 422 and "at least one criterion" in last.content.decode()
    assert (
        save(client, generated, key="", version=2, text="Names the buyer.", weight=1).status_code
        == 200
    )
    restored = restore(client, generated, version=3)
    assert restored.status_code == 200 and "Restore version 3" in restored.content.decode()
    generated.refresh_from_db()
    assert generated.version == 4
    assert list(generated.items.values_list("key", "text")) == [("c1", CAP), ("c2", CLAUSE)]
    bad = client.post(
        reverse("rubric-restore", args=["acme", generated.pk]), {"version": "x", "restore": 1}
    )
    assert bad.status_code == 400


def test_the_page_says_where_the_grades_of_a_removed_criterion_went(
    generated: Rubric, reviewer_user: User
) -> None:
    expert_marks(generated, {("c1", "GOOD"): True, ("c1", "POOR"): False})
    client = login(reviewer_user)
    deleted = delete(client, generated, key="c1", version=1)
    assert deleted.status_code == 200
    assert "2 expert grades are kept with the rubric&#x27;s history" in deleted.content.decode()
    page = client.get(review_url()).content.decode()
    aside = page[page.index("data-set-aside") : page.index('<ol class="versions">')]
    assert f"<code>c1</code> “{CAP}”: 2 grades, removed in version 2" in aside
    restored = restore(client, generated, version=2)
    assert "2 expert grades are back on the restored criteria." in restored.content.decode()
    assert "data-set-aside" not in client.get(review_url()).content.decode()  # none left aside
    assert generated.items.get(key="c1").grades.count() == 2


def test_the_list_counts_items_versions_and_disagreements_and_filters(
    generated: Rubric,
    rubric_grader_selected: Metagrader,
    reviewer_user: User,
) -> None:
    generate(generated.task.project, ["t1", "t2"])
    grading_run_execute(run_id=recheck_start(rubric=generated, key=None, user=None).pk)
    expert_marks(generated, {("c2", "GOOD"): True, ("c2", "OKAY"): True})  # judge: fail, pass
    client = login(reviewer_user)
    listing = client.get(reverse("rubric-list", args=["acme"]))
    page = listing.content.decode()
    assert page.count('href="/p/acme/rubrics/task/') == 3 and "3 rubrics" in page
    rows = [(r.task.external_id, r.item_count, r.version, n) for r, n in listing.context["rows"]]
    # t1 and t2 were never graded: their disagreements are unknown, not zero.
    assert rows == [("t0", 2, 1, 1), ("t1", 2, 1, None), ("t2", 2, 1, None)]
    fragment = client.get(reverse("rubric-list", args=["acme"]) + "?split=meta", headers=HTMX)
    html = fragment.content.decode()
    assert "<html" not in html and ">t2</a>" in html and ">t0</a>" not in html
    assert "1 rubric<" in html


def test_generation_form_starts_a_job_for_admins_and_explains_what_is_missing(
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    admin_user: User,
    reviewer_user: User,
    django_capture_on_commit_callbacks: Any,
) -> None:
    url = reverse("rubric-generate", args=["acme"])
    assert login(reviewer_user).post(url, {"split": "eval"}).status_code == 403
    admin = login(admin_user)
    with django_capture_on_commit_callbacks() as sent:
        started = admin.post(url, {"task_ids": "t0,\nt1", "regenerate": "on"})
    job = Job.objects.get(kind="rubric_generation")
    assert started.status_code == 302 and started["Location"] == reverse(
        "job-detail", args=[job.pk]
    )
    assert len(sent) == 1 and job.params["regenerate"] and len(job.params["tasks"]) == 2
    rubric_generation_execute(job_id=job.pk)
    listing = admin.get(reverse("rubric-list", args=["acme"])).content.decode()
    assert f"Job #{job.pk}" in listing and "2 written" in listing
    unknown = admin.post(url, {"task_ids": "t0, nope"})
    assert unknown.status_code == 400 and "unknown task ids: nope" in unknown.content.decode()
    empty = admin.post(url, {})
    assert (
        empty.status_code == 400 and "Name the tasks or choose a split." in empty.content.decode()
    )


def test_pages_point_to_where_a_grader_is_promoted(
    review_project: Project, reviewer_user: User
) -> None:
    client = login(reviewer_user)
    for url in (reverse("rubric-list", args=["acme"]), review_url()):
        page = client.get(url).content.decode()
        assert "No rubric grader is selected" in page and 'href="/p/acme/graders/"' in page
