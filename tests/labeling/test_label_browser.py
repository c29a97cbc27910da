"""The labeling pages in a real browser, driven with the keyboard and the mouse as an expert would."""

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from labeling.imports import jsonl_import
from labeling.models import (
    CriterionGrade,
    Membership,
    Preference,
    Project,
    QueueAssignment,
    Response,
    Role,
)
from labeling.queue import queue_build
from labeling.strategies import CoverageFirst
from tests.browser import logged_in_page
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = [
    "<script>window.__pwned = 'script'; alert('script')</script>",
    "<img src=x onerror=\"window.__pwned = 1; alert('onerror')\"> <svg onload=\"alert('svg')\"></svg>",
    "[click me](javascript:alert('link')) <a href=\"javascript:alert('a')\">raw link</a>",
    "![pixel](javascript:alert('image')) ![tracker](http://127.0.0.1:9/x.png)",
]


def trajectory(task: int, response: int) -> list[dict[str, Any]]:
    """An agent trajectory with one tool call and its result, each shown in an expander."""
    return [
        {"role": "user", "content": f"Task {task} question"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "lookup", "arguments": {"id": f"{task}-{response}"}}]},
        {"role": "tool", "name": "lookup", "content": '{"found": true}'},
        {"role": "assistant", "content": f"Answer {response} to task {task}, grounded in the lookup."},
    ]  # fmt: skip


def labeling_project(
    tmp_path: Path, *, tasks: int = 6, hostile: bool = False, trajectories: bool = False
) -> Project:
    project = Project.objects.create(slug="lab", name="Lab", guidelines="Prefer grounded answers.")
    records: list[dict[str, Any]] = [
        {"type": "dimension", "name": "correctness", "description": "Is it right?"}
    ]
    for t in range(tasks):
        text = HOSTILE[t % len(HOSTILE)] if hostile else f"Task {t} prompt"
        records.append({"type": "task", "id": f"t{t}", "prompt": text, "split": "meta",
                        "documents": [{"id": "d", "title": "Doc", "text": text}]})  # fmt: skip
        for r in range(2):
            body = (
                {"messages": trajectory(t, r)}
                if trajectories
                else {"content": f"{text} (task {t} response {r})"}
            )
            records.append({"type": "response", "id": f"t{t}/r{r}", "task": f"t{t}", "source": "secret-model", **body})  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "lab.jsonl", records))
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[project.dimensions.get()])
    return project


def expert(project: Project, name: str = "lena") -> User:
    user = User.objects.create_user(username=name, password="pw-for-tests-1")
    Membership.objects.create(user=user, project=project, role=Role.EXPERT)
    return user


def left_text(page: Any) -> str:
    return page.locator('#pair-card section.side[data-pick="left"] .text').inner_text()


def label_current(page: Any, key: str, confidence: str) -> str:
    """Label the pair on screen with the keyboard; return the assignment id that was labeled."""
    card = page.locator("#pair-card")
    assignment = card.get_attribute("data-assignment")
    page.keyboard.press(key)
    page.keyboard.press(confidence)
    page.keyboard.press("Enter")
    expect(card).not_to_have_attribute("data-assignment", assignment)
    return assignment


def test_expert_labels_five_pairs_by_keyboard_and_revises_one(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = labeling_project(tmp_path)
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    intro = page.locator("[data-intro]")
    expect(intro).to_contain_text("correctness")
    expect(intro).to_contain_text("Prefer grounded answers.")
    page.wait_for_timeout(300)  # a little time on the guidelines is not time on the pair
    page.keyboard.press("Enter")
    expect(intro).to_be_hidden()
    shown_left: dict[str, str] = {}
    keys = [
        ("ArrowLeft", "3"),
        ("ArrowRight", "2"),
        ("ArrowLeft", "1"),
        ("t", "3"),
        ("ArrowRight", "3"),
    ]
    for key, confidence in keys:
        shown_left[page.locator("#pair-card").get_attribute("data-assignment")] = left_text(page)
        label_current(page, key, confidence)
    last = list(shown_left)[-1]
    page.keyboard.press("Backspace")
    card = page.locator("#pair-card")
    expect(card).to_have_attribute("data-assignment", last)
    expect(page.locator('#pair-card button[data-pick="right"]')).to_have_attribute(
        "aria-pressed", "true"
    )
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(card).not_to_have_attribute("data-assignment", last)
    assert page.dialogs_seen == []

    labels = {p.pk: p for p in Preference.objects.filter(annotator__user=user, is_current=True)}
    assert len(labels) == 5
    expected = {
        0: ("left", 2),
        1: ("right", 1),
        2: ("left", 0),
        3: ("tie", 2),
        4: ("left", 0),
    }  # last revised
    for n, (assignment_id, left) in enumerate(shown_left.items()):
        assignment = QueueAssignment.objects.get(pk=assignment_id)
        pair = assignment.pair
        label = Preference.objects.get(
            response_a=pair.response_a,
            response_b=pair.response_b,
            annotator__user=user,
            is_current=True,
        )
        side, confidence = expected[n]
        winner = {"a": label.response_a_id, "b": label.response_b_id}.get(label.choice)
        if side == "tie":
            assert winner is None
        else:
            picked_left = Response.objects.get(pk=winner).content == left
            assert picked_left == (side == "left")
        assert label.confidence == confidence and label.slot_order == assignment.slot_order
        assert label.seconds_spent is not None and 0 < label.seconds_spent < 60
    revised = Preference.objects.filter(annotator__user=user, is_current=False)
    assert revised.count() == 1 and revised.get().choice != "tie"


def assert_label(user: User, assignment_id: str, side: str, confidence: int) -> None:
    """The stored current label of the pair behind the assignment picks `side` as shown."""
    assignment = QueueAssignment.objects.select_related("pair").get(pk=assignment_id)
    pair = assignment.pair
    label = Preference.objects.get(
        response_a=pair.response_a,
        response_b=pair.response_b,
        annotator__user=user,
        is_current=True,
    )
    left, right = ("a", "b") if assignment.slot_order == "ab" else ("b", "a")
    assert (label.choice, label.confidence) == ({"left": left, "right": right}[side], confidence)


def test_expert_labels_five_pairs_with_the_mouse_only(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    """Issue 13 item 11: a click on a response card or its Response 1/2 button picks that side;
    opening a document or a tool call, or selecting text, only does that; confidence changes
    only by its own buttons. Clicking the card used to set the confidence to "a guess" instead,
    because the card itself carried a data-confidence attribute the click handler matched."""
    project = labeling_project(tmp_path, trajectories=True)
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.get_by_role("button", name="Start").click()
    card = page.locator("#pair-card")

    def side(name: str) -> Any:
        return page.locator(f'#pair-card section.side[data-pick="{name}"]')

    def pressed(selector: str) -> None:
        expect(page.locator(f"#pair-card {selector}")).to_have_attribute("aria-pressed", "true")

    def open_document() -> None:
        page.locator("#pair-card details.document summary").click()
        expect(page.locator("#pair-card details.document")).to_have_attribute("open", "")

    def open_tool_call(where: str) -> None:
        side(where).locator("details.tool-call summary").click()
        side(where).locator(".turn.role-tool details summary").click()
        expect(side(where).locator("details.tool-call")).to_have_attribute("open", "")
        expect(side(where).locator(".turn.role-tool details")).to_have_attribute("open", "")

    def select_text(where: str) -> None:
        box = side(where).locator(".turn .text").last.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
        assert page.evaluate("document.getSelection().toString()")

    def pair_0() -> None:  # the card, then expanders on both sides, then the confidence
        side("left").locator(".turn .text").last.click()
        open_document()
        open_tool_call("right")
        page.get_by_role("button", name="3 · certain").click()

    def pair_1() -> None:  # confidence first: opening expanders must not reset it
        side("right").locator("h3").click()
        page.get_by_role("button", name="2 · leaning").click()
        open_tool_call("left")
        open_document()

    def pair_2() -> None:  # the Response 1 button
        page.get_by_role("button", name="← Response 1").click()
        page.get_by_role("button", name="3 · certain").click()
        open_tool_call("right")

    def pair_3() -> None:  # the Response 2 button, changed by a click on the other card
        page.get_by_role("button", name="Response 2 →").click()
        pressed('button[data-pick="right"]')
        side("left").locator(".turn-head").first.click()
        page.get_by_role("button", name="1 · a guess").click()
        select_text("right")

    def pair_4() -> None:  # a click on the card's empty space
        page.get_by_role("button", name="2 · leaning").click()
        box = side("right").bounding_box()
        assert box is not None
        page.mouse.click(box["x"] + box["width"] - 4, box["y"] + box["height"] - 4)

    walks = [(pair_0, "left", 2), (pair_1, "right", 1), (pair_2, "left", 2), (pair_3, "left", 0), (pair_4, "right", 1)]  # fmt: skip
    shown: list[tuple[str, str, int]] = []
    for walk, picked, confidence in walks:
        assignment = card.get_attribute("data-assignment")
        assert assignment
        walk()
        pressed(f'button[data-pick="{picked}"]')
        pressed(f'button[data-confidence="{confidence}"]')
        page.get_by_role("button", name="Submit").click()
        expect(card).not_to_have_attribute("data-assignment", assignment)
        shown.append((assignment, picked, confidence))
    assert page.dialogs_seen == []
    assert Preference.objects.filter(annotator__user=user, is_current=True).count() == 5
    for assignment, picked, confidence in shown:
        assert_label(user, assignment, picked, confidence)


def test_enter_on_a_focused_expander_opens_it_and_does_not_submit(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    """Issue 13 item 11: Enter on a focused summary toggles its expander; Enter used to submit
    the label instead. The other keys still work with the expander focused."""
    project = labeling_project(tmp_path, trajectories=True)
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.keyboard.press("Enter")
    card = page.locator("#pair-card")
    assignment = card.get_attribute("data-assignment")
    assert assignment
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("3")
    tool_call = page.locator('#pair-card section.side[data-pick="right"] details.tool-call')
    tool_call.locator("summary").focus()
    page.keyboard.press("Enter")
    expect(tool_call).to_have_attribute("open", "")
    page.keyboard.press("ArrowRight")  # the pick keys still work on a focused summary
    page.keyboard.press("Enter")
    expect(tool_call).not_to_have_attribute("open", "")
    page.wait_for_timeout(300)
    expect(card).to_have_attribute("data-assignment", assignment)
    assert not Preference.objects.exists()
    page.locator("#pair-card .prompt .text").click()  # off the expander, Enter submits
    page.keyboard.press("Enter")
    expect(card).not_to_have_attribute("data-assignment", assignment)
    assert_label(user, assignment, "right", 2)


def test_two_annotators_at_once_never_get_the_same_pair(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = labeling_project(tmp_path, tasks=12)
    pages = [logged_in_page(browser, live_server, expert(project, name)) for name in ("ann", "ben")]
    for page in pages:
        page.goto(f"{live_server.url}/p/lab/label/")
    for page in pages:
        intro = page.locator("[data-intro]")
        # One starts by keyboard, the other with the mouse (or a tap).
        if page is pages[0]:
            page.keyboard.press("Enter")
        else:
            intro.get_by_role("button", name="Start").click()
        expect(intro).to_be_hidden()
        expect(page.locator(".pair-body")).to_be_visible()
    for _ in range(4):
        for page in pages:
            label_current(page, "ArrowLeft", "2")
    by_user = [
        set(QueueAssignment.objects.filter(annotator__name=name).values_list("pair_id", flat=True))
        for name in ("ann", "ben")
    ]
    assert [len(pairs) for pairs in by_user] == [5, 5], (
        by_user
    )  # four labeled plus the one on screen
    assert not by_user[0] & by_user[1]
    slots = QueueAssignment.objects.values_list("slot_id", flat=True)
    assert len(slots) == len(set(slots))


def test_a_label_sent_while_offline_is_retried_without_loss(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = labeling_project(tmp_path)
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.keyboard.press("Enter")
    assignment = page.locator("#pair-card").get_attribute("data-assignment")
    page.context.set_offline(True)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("3")
    page.keyboard.press("Enter")
    expect(page.locator("[data-status]")).to_contain_text("Not saved yet")
    assert Preference.objects.count() == 0
    page.context.set_offline(False)
    expect(page.locator("#pair-card")).not_to_have_attribute(
        "data-assignment", assignment, timeout=20_000
    )
    assert Preference.objects.filter(annotator__user=user).count() == 1


def test_hostile_responses_render_as_inert_text(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = labeling_project(tmp_path, tasks=4, hostile=True)
    page = logged_in_page(browser, live_server, expert(project))
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if "alert" in message.text else None
    )
    page.goto(f"{live_server.url}/p/lab/label/")
    page.keyboard.press("Enter")
    for _ in range(4):
        page.locator("#pair-card details.document summary").first.click()
        for link in page.locator("#pair-card a").all():
            href = link.get_attribute("href") or ""
            assert not href.lower().startswith("javascript:")
        assert (
            page.locator("#pair-card img, #pair-card svg, #pair-card script:not([src])").count()
            == 0
        )
        assert (
            "<script>" in page.locator("#pair-card .prompt .text").inner_text()
            or "alert" in page.locator("#pair-card").inner_text()
        )
        label_current(page, "ArrowLeft", "2")
    assert page.evaluate("() => typeof window.__pwned") == "undefined"
    assert page.dialogs_seen == [] and errors == []


def test_criterion_grading_by_keyboard(browser: Any, live_server: Any, tmp_path: Path) -> None:
    project = Project.objects.create(slug="lab", name="Lab")
    records = [
        {"type": "task", "id": "t", "prompt": "Review", "split": "meta"},
        {"type": "response", "id": "t/r1", "task": "t", "content": "first"},
        {"type": "response", "id": "t/r2", "task": "t", "content": "second"},
        {"type": "rubric", "task": "t", "items": [{"id": "c1", "text": "Names the cap."}, {"id": "c2", "text": "Cites clause 4."}, {"id": "c3", "text": "Flags the MAC."}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "g.jsonl", records))
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/grade/")
    expect(page.locator(".graded .text")).to_have_text("first")
    expect(page.locator("[data-left]")).to_have_text(
        "2 responses left to grade, this one included."
    )
    page.keyboard.press("p")  # c1 pass, focus moves to c2
    page.keyboard.press("f")  # c2 fail, focus moves on to c3
    page.keyboard.press("n")  # right after a mark: the note of the criterion just failed
    page.keyboard.type("clause 4 is misquoted")
    page.keyboard.press("Escape")  # on to the next unmarked criterion, c3
    page.keyboard.press("k")
    page.keyboard.press("k")  # to c1: N now notes the focused criterion
    page.keyboard.press("n")
    page.keyboard.type("exact")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")  # c3 unmarked: refused, shown in place
    expect(page.locator("#grading-card p.error")).to_contain_text("not marked")
    expect(page.locator(".criterion.unmarked")).to_have_count(1)  # which one, marked out
    expect(page.locator(".criterion.unmarked")).to_contain_text("Flags the MAC.")
    expect(page.locator(".criterion.focused")).to_contain_text("Flags the MAC.")  # first unmarked
    page.keyboard.press("k")
    page.keyboard.press("j")
    page.keyboard.press("p")
    page.keyboard.press("Enter")
    expect(page.locator(".graded .text")).to_have_text("second")
    expect(page.locator("[data-left]")).to_have_text("1 response left to grade, this one included.")
    grades = {
        g.item.key: (g.passed, g.note) for g in CriterionGrade.objects.filter(annotator__user=user)
    }
    assert grades == {
        "c1": (True, "exact"),
        "c2": (False, "clause 4 is misquoted"),
        "c3": (True, ""),
    }


def test_after_a_mark_and_its_note_focus_moves_to_the_next_unmarked_criterion(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    """Issue 13 item 12: F, N, a note, Esc, P used to pass the criterion just failed (Esc put
    focus back on it); now P marks the next one. A note closed by Enter moves on the same way
    instead of submitting, and Enter then submits."""
    project = Project.objects.create(slug="lab", name="Lab")
    records = [
        {"type": "task", "id": "t", "prompt": "Review", "split": "meta"},
        {"type": "response", "id": "t/r1", "task": "t", "content": "first"},
        {"type": "rubric", "task": "t", "items": [{"id": "c1", "text": "Names the cap."}, {"id": "c2", "text": "Cites clause 4."}, {"id": "c3", "text": "Flags the MAC."}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "g.jsonl", records))
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/grade/")
    expect(page.locator(".criterion.focused")).to_contain_text("Names the cap.")
    page.keyboard.press("f")
    page.keyboard.press("n")
    page.keyboard.type("no cap named")
    page.keyboard.press("Escape")
    expect(page.locator(".criterion.focused")).to_contain_text("Cites clause 4.")
    page.keyboard.press("p")
    expect(page.locator(".criterion.focused")).to_contain_text("Flags the MAC.")
    page.keyboard.press("f")
    page.keyboard.press("n")
    page.keyboard.type("MAC missed")
    page.keyboard.press("Enter")  # closes the note; nothing is submitted yet
    expect(page.locator(".criterion.focused")).to_contain_text("Flags the MAC.")
    page.wait_for_timeout(300)
    assert not CriterionGrade.objects.exists()
    page.keyboard.press("Enter")
    expect(page.locator("#grading-card .empty")).to_be_visible()
    grades = {
        g.item.key: (g.passed, g.note) for g in CriterionGrade.objects.filter(annotator__user=user)
    }
    assert grades == {"c1": (False, "no cap named"), "c2": (True, ""), "c3": (False, "MAC missed")}


def test_on_a_phone_the_page_fits_and_the_responses_stack(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = labeling_project(tmp_path)
    page = logged_in_page(browser, live_server, expert(project))
    page.set_viewport_size({"width": 420, "height": 800})
    page.goto(f"{live_server.url}/p/lab/label/")
    page.get_by_role("button", name="Start").click()
    left, right = page.locator(".side").all()
    expect(right).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 420  # no sideways scroll
    left_box, right_box = left.bounding_box(), right.bounding_box()
    assert left_box is not None and right_box is not None
    assert right_box["y"] >= left_box["y"] + left_box["height"]  # one under the other
    assert left_box["width"] > 300  # each takes the width, not half of it
