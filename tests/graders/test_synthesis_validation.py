"""Human validation of a synthesis: the sample and its queue pairs, labels through the real
queue, the report (command and page), access and blinding."""

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from graders.synthesis.validation_services import (
    VALIDATION_STRATEGY,
    SampleRefused,
    synthesis_validation_sample,
)
from labeling.models import (
    Annotator,
    DrawOutcome,
    Preference,
    Project,
    Provider,
    QueueAssignment,
    QueuePair,
    QueueSlot,
    Synthesis,
    SynthesisDraw,
)
from labeling.queue import LabelInput, annotator_for_user, label_submit, pair_claim_next
from tests.conftest import member
from tests.graders.synthesis_factory import AGENT, STEERING, draw_make, synthesis_make


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def strata(project: Project) -> Synthesis:
    """Four strata of first draws: friendliness/clarity x airline/retail, three draws each
    (kept and vetoed mixed), plus draws a sample must never take: a retry, a failed and a
    pending first draw."""
    synthesis = synthesis_make(project)
    votes = [(True, True), (True, False), (False,)]
    for dimension in ("friendliness", "clarity"):
        for domain in ("airline", "retail"):
            for i, cascade in enumerate(votes):
                draw_make(
                    synthesis,
                    task=f"{domain}-{i}",
                    dimension=dimension,
                    domain=domain,
                    votes=cascade,
                )
    draw_make(synthesis, task="airline-0", dimension="friendliness", retry=1)
    draw_make(synthesis, task="airline-9", votes=(), outcome=DrawOutcome.FAILED)
    draw_make(synthesis, task="airline-8", votes=(True,), outcome=DrawOutcome.PENDING)
    return synthesis


def test_sample_is_stratified_marked_and_queued_with_three_slots(strata: Synthesis) -> None:
    result = synthesis_validation_sample(synthesis=strata, size=8, seed=3)
    assert (result.eligible, result.sampled, result.added) == (12, 8, 8)
    sampled = SynthesisDraw.objects.filter(validation_sampled=True).select_related(
        "cell__task", "cell__dimension"
    )
    assert all(d.retry == 0 and d.outcome in ("kept", "vetoed") for d in sampled)
    per_stratum = sorted(
        sum(1 for d in sampled if (d.cell.dimension.name, d.cell.task.domain) == key)
        for key in {(d.cell.dimension.name, d.cell.task.domain) for d in sampled}
    )
    assert per_stratum == [2, 2, 2, 2]  # equal allocation
    pairs = QueuePair.objects.all()
    assert {(p.response_a_id, p.response_b_id, p.dimension_id) for p in pairs} == {
        (
            min(d.low_response_id, d.high_response_id),
            max(d.low_response_id, d.high_response_id),
            d.cell.dimension_id,
        )
        for d in sampled
    }
    assert {(p.strategy, p.overlap) for p in pairs} == {(VALIDATION_STRATEGY, 3)}
    assert QueueSlot.objects.count() == 24
    # One block per dimension, so each dimension's introduction shows once.
    blocks = {(p.block, p.dimension_id) for p in pairs}
    assert len(blocks) == 2 and len({b for b, _ in blocks}) == 2


def test_sampling_again_adds_nothing_and_growing_keeps_the_sample(strata: Synthesis) -> None:
    synthesis_validation_sample(synthesis=strata, size=8, seed=3)
    first = set(SynthesisDraw.objects.filter(validation_sampled=True).values_list("pk", flat=True))
    again = synthesis_validation_sample(synthesis=strata, size=8, seed=3)
    assert (again.sampled, again.added) == (8, 0)
    assert QueuePair.objects.count() == 8 and QueueSlot.objects.count() == 24
    grown = synthesis_validation_sample(synthesis=strata, size=150, seed=3)
    assert (grown.sampled, grown.added) == (12, 4)
    now = set(SynthesisDraw.objects.filter(validation_sampled=True).values_list("pk", flat=True))
    assert first < now
    assert QueuePair.objects.count() == 12 and QueueSlot.objects.count() == 36


def test_sampling_refuses_bad_input(project: Project) -> None:
    empty = synthesis_make(project)
    draw_make(empty, task="t", votes=(True,), outcome=DrawOutcome.PENDING)
    with pytest.raises(SampleRefused, match="nothing to sample yet"):
        synthesis_validation_sample(synthesis=empty, size=10, seed=0)
    with pytest.raises(SampleRefused, match="at least 1"):
        synthesis_validation_sample(synthesis=empty, size=0, seed=0)
    assert not QueuePair.objects.exists()


@pytest.fixture
def labeled(project: Project) -> Synthesis:
    """Four sampled pairs labeled by three people through the queue (the label page's own
    service), each seeing its own random slot order:
      P1 kept, all three prefer the higher level;   P2 vetoed by judge 2, all prefer higher;
      P3 vetoed by judge 1, all prefer lower;        P4 kept, two prefer higher, one lower.
    P3 and P4 have the higher level's response created first (the smaller id)."""
    synthesis = synthesis_make(project)
    plan = {
        draw_make(synthesis, task="a-1", votes=(True, True)).pk: ["high"] * 3,
        draw_make(synthesis, task="a-2", votes=(True, False)).pk: ["high"] * 3,
        draw_make(synthesis, task="a-3", votes=(False,), high_first=True).pk: ["low"] * 3,
        draw_make(synthesis, task="a-4", votes=(True, True), high_first=True).pk: [
            "high",
            "high",
            "low",
        ],
    }
    synthesis_validation_sample(synthesis=synthesis, size=150, seed=0)
    draws = {d.pk: d for d in SynthesisDraw.objects.all()}
    for n in range(3):
        annotator = Annotator.objects.create(project=project, name=f"person-{n}")
        while (assignment := pair_claim_next(project=project, annotator=annotator)) is not None:
            draw = next(
                d
                for d in draws.values()
                if {d.low_response_id, d.high_response_id}
                == {assignment.pair.response_a_id, assignment.pair.response_b_id}
            )
            wanted = plan[draw.pk][n]
            left = (
                assignment.pair.response_a_id
                if assignment.slot_order == "ab"
                else assignment.pair.response_b_id
            )
            preferred = draw.high_response_id if wanted == "high" else draw.low_response_id
            side = "left" if preferred == left else "right"
            label_submit(assignment=assignment, label=LabelInput(side, 2, 5.0))
    assert QueueAssignment.objects.filter(submitted_at__isnull=False).count() == 12
    return synthesis


# By hand, with codes 0 = the smaller response id won, 1 = the larger:
#   P1 syn 1 maj 1; P2 syn 1 maj 1; P3 syn 0 (high id smaller) maj 1 (low won); P4 syn 0 maj 0.
#   D_0: values syn [1,1,0,0], maj [1,1,1,0]; n = 8, n_0 = 3, n_1 = 5, one disagreement (2
#   off-diagonal coincidences): alpha = 1 - 7 * 2 / (64 - 9 - 25) = 1 - 14/30 = 8/15.
#   D_1 = P1 P2 P4, D_2 = P1 P4: no disagreement, alpha 1.
#   Accuracy: D_0 3/4 (bootstrap of 3 right in 4: [0.25, 1]), D_1 and D_2 all right ([1, 1]).
#   Rejects: judge 1 took out P3 (wrong), judge 2 took out P2 (right).
EXPECTED = {
    "depths": [
        {"depth": 0, "pairs": 4, "yield": 1.0, "accuracy": 0.75, "ci": [0.25, 1.0],
         "krippendorff_alpha": pytest.approx(8 / 15)},
        {"depth": 1, "pairs": 3, "yield": 0.75, "accuracy": 1.0, "ci": [1.0, 1.0],
         "krippendorff_alpha": pytest.approx(1.0)},
        {"depth": 2, "pairs": 2, "yield": 0.5, "accuracy": 1.0, "ci": [1.0, 1.0],
         "krippendorff_alpha": pytest.approx(1.0)},
    ],
    "rejected_by": [
        {"judge": "judge-SECRET-1", "pairs": 1, "accuracy": 0.0},
        {"judge": "judge-SECRET-2", "pairs": 1, "accuracy": 1.0},
    ],
}  # fmt: skip


def test_command_prints_table_2_of_labels_given_in_the_queue(labeled: Synthesis) -> None:
    out = StringIO()
    call_command("synthesis_validation", "--project", "acme", "--json", stdout=out)
    assert json.loads(out.getvalue()) == EXPECTED
    text = StringIO()
    call_command(
        "synthesis_validation", "--project", "acme", "--synthesis", "syn-SECRET", stdout=text
    )
    lines = text.getvalue().splitlines()
    assert lines[0] == "depth\tpairs\tyield\taccuracy\tci\tkrippendorff_alpha"
    assert lines[1] == "0\t4\t1.000\t0.750\t[0.250, 1.000]\t0.533"
    assert lines[-1] == "judge-SECRET-2\t1\t1.000"


def test_a_synthetic_or_overall_label_is_not_a_human_one(labeled: Synthesis) -> None:
    draw = SynthesisDraw.objects.get(cell__task__external_id="a-2")
    robot = Annotator.objects.create(project=labeled.project, name="robot")
    a, b = sorted((draw.low_response_id, draw.high_response_id))
    for provider, dimension in ((Provider.SYNTHETIC, draw.cell.dimension), (Provider.HUMAN, None)):
        Preference.objects.create(
            task=draw.cell.task, response_a_id=a, response_b_id=b, choice="tie",
            dimension=dimension, provider=provider, annotator=robot,
        )  # fmt: skip
    out = StringIO()
    call_command("synthesis_validation", "--project", "acme", "--json", stdout=out)
    assert json.loads(out.getvalue()) == EXPECTED


def test_api_serves_the_same_document_to_reviewers_only(
    labeled: Synthesis, reviewer_user: User, expert_user: User
) -> None:
    url = reverse("api-synthesis-validation", args=["acme", "syn-SECRET"])
    assert client_for(reviewer_user).get(url).json() == EXPECTED
    assert client_for(expert_user).get(url).status_code == 403
    missing = reverse("api-synthesis-validation", args=["acme", "nope/x"])
    assert client_for(reviewer_user).get(missing).status_code == 404


def test_command_refuses_bad_input(project: Project) -> None:
    with pytest.raises(CommandError, match="project 'nope' does not exist"):
        call_command("synthesis_validation", "--project", "nope")
    with pytest.raises(CommandError, match=r"has no synthesis$"):
        call_command("synthesis_validation", "--project", "acme")
    synthesis_make(project, external_id="one")
    synthesis_make(project, external_id="two")
    with pytest.raises(CommandError, match=r"has 2 syntheses \(one, two\): name one"):
        call_command("synthesis_validation", "--project", "acme")
    with pytest.raises(CommandError, match="has no synthesis 'three'"):
        call_command("synthesis_validation", "--project", "acme", "--synthesis", "three")
    out = StringIO()
    call_command("synthesis_validation", "--project", "acme", "--synthesis", "one", stdout=out)
    assert out.getvalue().strip() == "No validation sample yet for synthesis 'one'."
    synthesis_make(project, external_id="broken", judges=[])
    with pytest.raises(CommandError, match="'broken': a synthesis needs at least one filter"):
        call_command("synthesis_validation", "--project", "acme", "--synthesis", "broken")


def test_page_shows_the_report_to_reviewers(
    labeled: Synthesis, reviewer_user: User, expert_user: User, outsider: User
) -> None:
    url = reverse("synthesis-validation", args=["acme", labeled.pk])
    html = client_for(reviewer_user).get(url).content.decode()
    assert "4 of 4 pairs have 3 labels (12 of 12 labels given)" in html
    assert '<circle class="point accuracy"' in html  # the chart
    assert "[0.250, 1.000]" in html and "0.533" in html
    assert "judge-SECRET-1" in html
    assert "synthesis-validation-sample" not in html and 'name="size"' not in html
    assert client_for(expert_user).get(url).status_code == 403
    assert client_for(outsider).get(url).status_code == 404
    other = synthesis_make(Project.objects.create(slug="b", name="B"), external_id="x")
    assert (
        client_for(reviewer_user)
        .get(reverse("synthesis-validation", args=["acme", other.pk]))
        .status_code
        == 404
    )


def test_admin_takes_the_sample_from_the_page(
    strata: Synthesis, admin_user: User, reviewer_user: User
) -> None:
    client = client_for(admin_user)
    page = reverse("synthesis-validation", args=["acme", strata.pk])
    before = client.get(page).content.decode()
    assert "No sample yet. Take one below" in before and 'name="size"' in before
    assert "The report appears once a sample is taken" in before
    sample = reverse("synthesis-validation-sample", args=["acme", strata.pk])
    assert client_for(reviewer_user).post(sample, {"size": 4, "seed": 0}).status_code == 403
    bad = client.post(sample, {"size": 0, "seed": 0})
    assert bad.status_code == 400 and "greater than or equal to 1" in bad.content.decode()
    response = client.post(sample, {"size": 4, "seed": 0}, follow=True)
    html = response.content.decode()
    assert "Sample: 4 of 12 first draws (4 new), queued for three labels each." in html
    assert "0 of 4 pairs have 3 labels" in html
    assert "No pair has 3 labels with a majority yet" in html
    # The sample by stratum: three finished first draws each, one sampled from each.
    for dimension in ("clarity", "friendliness"):
        for domain in ("airline", "retail"):
            row = f'<td>{dimension}</td><td>{domain}</td><td>bad-ok</td><td class="num">3</td>'
            assert row + '<td class="num">1</td>' in html
    assert QueuePair.objects.count() == 4


def test_page_with_nothing_to_sample(project: Project, admin_user: User) -> None:
    synthesis = synthesis_make(project)
    client = client_for(admin_user)
    html = client.get(reverse("synthesis-validation", args=["acme", synthesis.pk])).content
    assert b"nothing to sample" in html
    refused = client.post(
        reverse("synthesis-validation-sample", args=["acme", synthesis.pk]), {"size": 5, "seed": 0}
    )
    assert refused.status_code == 400 and b"nothing to sample yet" in refused.content


def test_the_label_page_of_a_validation_pair_is_blind(strata: Synthesis, project: Project) -> None:
    synthesis_validation_sample(synthesis=strata, size=150, seed=0)
    expert = member(project, "elle", "expert")
    client = client_for(expert)
    secrets = [AGENT, "SECRET", *STEERING.values(), "/bad/", "/ok/", "/good/", "steer", "veto"]
    pages = []
    for _ in range(3):
        html = client.get(reverse("label", args=["acme"])).content.decode()
        assert "Reply " in html  # a synthesis pair is served
        assignment = QueueAssignment.objects.filter(
            annotator=annotator_for_user(project=project, user=expert), submitted_at__isnull=True
        ).get()
        pages.append(html)
        pages.append(
            client.get(reverse("label-revise", args=["acme", assignment.pk])).content.decode()
        )
        label_submit(assignment=assignment, label=LabelInput("left", 1, 2.0))
    # The task's own page and API, which experts reach too, hold nothing of the synthesis.
    pages.append(client.get(reverse("task-detail", args=["acme", "airline-0"])).content.decode())
    pages.append(client.get(reverse("api-task", args=["acme", "airline-0"])).content.decode())
    assert "Reply " in pages[-1]
    for html in pages:
        lowered = html.lower()
        for secret in secrets:
            assert secret.lower() not in lowered, secret
    # The slot order is drawn per assignment as for any pair.
    orders = set(QueueAssignment.objects.values_list("slot_order", flat=True))
    assert orders <= {"ab", "ba"}


ROLES = ("admin", "expert", "reviewer", "outsider", "anonymous")


@pytest.mark.parametrize(
    ("method", "name", "expected"),
    [
        ("get", "synthesis-validation", (200, 403, 200, 404, 302)),
        ("post", "synthesis-validation-sample", (302, 403, 403, 404, 302)),
        ("get", "api-synthesis-validation", (200, 403, 200, 404, 403)),
    ],
)
def test_access_matrix(
    strata: Synthesis,
    admin_user: User,
    expert_user: User,
    reviewer_user: User,
    outsider: User,
    method: str,
    name: str,
    expected: tuple[int, ...],
) -> None:
    users = {"admin": admin_user, "expert": expert_user, "reviewer": reviewer_user}
    users["outsider"] = outsider
    key = strata.external_id if name.startswith("api") else strata.pk
    url = reverse(name, args=["acme", key])
    for role, status in zip(ROLES, expected, strict=True):
        client = client_for(users[role]) if role in users else Client()
        response = getattr(client, method)(url, {"size": 2, "seed": 0} if method == "post" else {})
        assert response.status_code == status, (role, name)
