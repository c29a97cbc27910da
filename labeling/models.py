"""Schema of the labeling side: projects, tasks, responses and every kind of expert data.

Database constraints, not forms, keep ids unique per project and values in range, because data
arrives through three doors (command, page, API) and the worker.
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone

from labeling.job_progress import JobEta, job_eta

# The largest value an integer column holds on every database the workbench runs on
# (PostgreSQL's integer; SQLite's are wider): forms whose numbers are stored cap them at this,
# so a huge number is a field error, not a database overflow.
INT_FIELD_MAX = 2**31 - 1


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    EXPERT = "expert", "Expert"
    REVIEWER = "reviewer", "Reviewer"


class Split(models.TextChoices):
    UNASSIGNED = "unassigned", "Unassigned"
    META = "meta", "Meta"
    SELECTION = "selection", "Selection"
    TRAIN = "train", "Train"
    EVAL = "eval", "Eval"


class Project(models.Model):
    slug = models.SlugField(max_length=80, unique=True)
    name = models.CharField(max_length=200)
    guidelines = models.TextField(blank=True)
    allow_ties = models.BooleanField(default=True)
    overlap = models.PositiveSmallIntegerField(
        default=1, help_text="How many annotators label each pair."
    )
    # The share of graded groups the reward API keeps for labeling (graders/capture.py), unless
    # a token sets its own; 0 turns capture off.
    capture_rate = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of graded groups the reward API captures (0 to 1).",
    )
    # Whether a drift alert starts a re-search of the grader in use by itself
    # (graders/research.py), and the budget each such search gets: required, since nobody
    # watches what an automatic search spends.
    research_auto = models.BooleanField(
        default=False, help_text="Start a re-search automatically when drift is detected."
    )
    research_max_calls = models.PositiveIntegerField(
        null=True, blank=True, help_text="Judge and proposer calls an automatic re-search may make."
    )
    research_max_cost = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="What an automatic re-search may spend, in the judges' price unit.",
    )
    # Drift of the promoted grader on fresh labels (graders/drift.py): alert when the fresh
    # interval's high end is more than drift_margin below the accuracy at selection, with at
    # least drift_min_pairs fresh labeled pairs.
    drift_margin = models.FloatField(
        default=0.05,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Alert when fresh accuracy lies this far below the accuracy at selection.",
    )
    drift_min_pairs = models.PositiveIntegerField(
        default=20, help_text="Fresh labeled pairs needed before a drift alert."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # The labeling queue's strategy (a name registered in labeling.strategies), the share of
    # pairs it draws uniformly at random, and how many new labels trigger a background rewrite
    # of its priorities (0: only after search rounds and on demand).
    queue_strategy = models.CharField(max_length=50, default="coverage")
    queue_epsilon = models.FloatField(
        default=0.1, help_text="The share of pairs drawn uniformly at random (0 to 1)."
    )
    queue_refresh_labels = models.PositiveIntegerField(
        default=20, help_text="Rewrite priorities after this many new labels; 0: never by count."
    )
    # New labels since priorities were last rewritten: a counter bumped with F() by each label,
    # so the trigger needs no scan. A request time, not a flag, marks a refresh as pending, so a
    # task the broker lost stops blocking new ones after QUEUE_REFRESH_STALE.
    queue_labels_since_refresh = models.PositiveIntegerField(default=0)
    queue_refresh_requested_at = models.DateTimeField(null=True, blank=True)
    queue_written_at = models.DateTimeField(null=True, blank=True)
    queue_written_strategy = models.CharField(max_length=50, blank=True, default="")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(overlap__gte=1), name="overlap_gte_1"),
            models.CheckConstraint(
                condition=Q(queue_epsilon__gte=0, queue_epsilon__lte=1),
                name="project_queue_epsilon_unit",
            ),
            models.CheckConstraint(
                condition=Q(capture_rate__gte=0, capture_rate__lte=1), name="project_capture_rate"
            ),
            models.CheckConstraint(
                condition=Q(research_max_cost__isnull=True) | Q(research_max_cost__gte=0),
                name="project_research_max_cost",
            ),
            models.CheckConstraint(
                condition=Q(drift_margin__gte=0, drift_margin__lte=1), name="project_drift_margin"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ProjectChange(models.Model):
    """One change to a project's settings, dimensions or members made in the app: who, when,
    and each changed field's old and new value ({"field": [old, new]})."""

    class Kind(models.TextChoices):
        SETTINGS = "settings", "Settings"
        DIMENSION = "dimension", "Dimension"
        MEMBER = "member", "Member"
        CREATED = "created", "Created"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="changes")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    at = models.DateTimeField(auto_now_add=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    subject = models.CharField(max_length=200, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["project", "-at"], name="project_change_recent")]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject} in {self.project} at {self.at:%Y-%m-%d %H:%M}"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role"),
        ]

    def __str__(self) -> str:
        return f"{self.user} as {self.role} in {self.project}"


class Annotator(models.Model):
    """Whoever gave a label: a user of the app, or an external name that came with an import."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="annotators")
    name = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="annotator_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


class Dimension(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="dimensions")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    # A retired dimension keeps its labels (exports, agreement) but gets no new queue blocks.
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="dimension_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


class Task(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    external_id = models.CharField(max_length=200)
    domain = models.CharField(max_length=100, blank=True, default="")
    prompt = models.TextField()
    instructions = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    split = models.CharField(max_length=16, choices=Split.choices, default=Split.UNASSIGNED)

    class Meta:
        ordering = ["external_id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="task_unique_id"),
            models.CheckConstraint(condition=Q(split__in=Split.values), name="task_split"),
        ]
        indexes = [models.Index(fields=["project", "split", "domain"])]

    def __str__(self) -> str:
        return self.external_id


class Document(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="documents")
    external_id = models.CharField(max_length=200)
    title = models.CharField(max_length=500, blank=True, default="")
    text = models.TextField()
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["task", "external_id"], name="document_unique_id"),
        ]

    def __str__(self) -> str:
        return self.title or self.external_id


class Response(models.Model):
    """One response or agent trajectory. `project` is repeated from the task so that the
    database itself can keep response ids unique within a project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="responses")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="responses")
    external_id = models.CharField(max_length=200)
    content = models.TextField(blank=True, default="")
    messages = models.JSONField(null=True, blank=True)
    source_model = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["external_id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="response_unique_id"),
        ]
        # The home page's trajectory count, without reading every response of the project.
        indexes = [
            models.Index(
                fields=["project"], condition=Q(messages__isnull=False), name="response_trajectory"
            )
        ]

    def __str__(self) -> str:
        return self.external_id

    @property
    def is_trajectory(self) -> bool:
        return self.messages is not None


class ResponseTally(models.Model):
    """How many responses a task has, kept by the database itself: triggers on
    labeling_response (migration 0020) add a statement's inserted rows and take away its deleted
    ones, whichever path wrote them (the ORM, an import's COPY, a capture's eviction, a
    cascade). The project home sums it over the tasks under an expert rubric instead of
    counting their 200,000 responses. Nothing in the app writes it; a response never moves to
    another task (imports refuse that), so updates need no trigger."""

    task = models.OneToOneField(
        Task, on_delete=models.CASCADE, primary_key=True, related_name="response_tally"
    )
    responses = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.task}: {self.responses} responses"


class AuthorKind(models.TextChoices):
    EXPERT = "expert", "Expert"
    GENERATED = "generated", "Generated"
    REVIEWED = "reviewed", "Reviewed"


class Rubric(models.Model):
    """A task's rubric. `origin` tells generated rubrics apart (the program that wrote them);
    it is empty for expert rubrics, so a task has at most one rubric per author kind and origin."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="rubrics")
    author_kind = models.CharField(max_length=16, choices=AuthorKind.choices)
    origin = models.CharField(max_length=200, blank=True, default="")
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "author_kind", "origin"], name="rubric_unique_author"
            ),
            models.CheckConstraint(
                condition=Q(author_kind__in=AuthorKind.values), name="rubric_author_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.author_kind} rubric of {self.task}"


class RubricItem(models.Model):
    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="items")
    key = models.CharField(max_length=100)
    text = models.TextField()
    weight = models.FloatField(default=1.0)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["rubric", "key"], name="rubric_item_unique_key"),
            models.CheckConstraint(condition=Q(weight__gt=0), name="rubric_item_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.text[:60]}"


class RubricRevision(models.Model):
    """A snapshot of a rubric's items after each change, so any version can be read or restored."""

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    items = models.JSONField()
    editor = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["version"]
        constraints = [
            models.UniqueConstraint(fields=["rubric", "version"], name="rubric_revision_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.rubric} v{self.version}"


class CriterionGrade(models.Model):
    """An expert's pass or fail on one criterion for one response. `project` is repeated from
    the response (every write sets it to the response's) so that a project's grades are
    counted without joining its responses."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    response = models.ForeignKey(
        Response, on_delete=models.CASCADE, related_name="criterion_grades"
    )
    item = models.ForeignKey(RubricItem, on_delete=models.CASCADE, related_name="grades")
    passed = models.BooleanField()
    annotator = models.ForeignKey(Annotator, on_delete=models.CASCADE)
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["response", "item", "annotator"], name="criterion_grade_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.response} {self.item.key}: {'pass' if self.passed else 'fail'}"


class RetiredCriterionGrade(models.Model):
    """An expert's grade on a criterion that a later version of its rubric left out (a
    reviewer's delete or restore, a regeneration, an import): kept with the criterion as it
    was, and put back on the criterion when a version holding it again (same key, same text)
    becomes current. Removing a criterion never loses what experts said about it."""

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="retired_grades")
    item_key = models.CharField(max_length=100)
    item_text = models.TextField()
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    annotator = models.ForeignKey(Annotator, on_delete=models.CASCADE, related_name="+")
    passed = models.BooleanField()
    note = models.TextField(blank=True, default="")
    graded_at = models.DateTimeField()
    retired_in_version = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["rubric", "item_key"], name="retired_grade_item")]

    def __str__(self) -> str:
        return f"{self.response} {self.item_key} (retired in v{self.retired_in_version})"


class ScoreProvider(models.TextChoices):
    TRUE_GRADER = "true_grader", "True grader"
    EXPERT = "expert", "Expert"
    JUDGE = "judge", "Judge"


class Score(models.Model):
    """A response's score from one provider. `project` is repeated from the response (every
    write sets it to the response's) so that a project's scores are counted without joining
    its million responses."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="scores")
    provider = models.CharField(max_length=16, choices=ScoreProvider.choices)
    value = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["response", "provider"], name="score_unique"),
            models.CheckConstraint(
                condition=Q(value__gte=0) & Q(value__lte=1), name="score_value_in_unit_range"
            ),
            models.CheckConstraint(
                condition=Q(provider__in=ScoreProvider.values), name="score_provider"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.response} {self.provider}={self.value}"


class Provider(models.TextChoices):
    HUMAN = "human", "Human"
    SYNTHETIC = "synthetic", "Synthetic"
    JUDGE = "judge", "Judge"


class Choice(models.TextChoices):
    A = "a", "A"
    B = "b", "B"
    TIE = "tie", "Tie"


class Preference(models.Model):
    """A pairwise label. Edits add a row and retire the old one, so history is kept while the
    database guarantees one current label per pair (either order), dimension and annotator."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="preferences")
    response_a = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    response_b = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    choice = models.CharField(max_length=3, choices=Choice.choices)
    confidence = models.PositiveSmallIntegerField(null=True, blank=True)
    dimension = models.ForeignKey(Dimension, null=True, blank=True, on_delete=models.CASCADE)
    provider = models.CharField(max_length=16, choices=Provider.choices)
    annotator = models.ForeignKey(Annotator, on_delete=models.CASCADE, related_name="preferences")
    slot_order = models.CharField(
        max_length=2, blank=True, default="", help_text="'ab' or 'ba': which side was shown left."
    )
    seconds_spent = models.FloatField(null=True, blank=True)
    # The chance the queue's strategy gave this pair when it served it, and the size of the pool
    # it drew from (copied from the assignment); null: not chosen by a sampling strategy
    # (coverage, a pinned pair, an import). Estimators reweight actively chosen labels by them.
    selection_probability = models.FloatField(null=True, blank=True)
    selection_pool = models.PositiveIntegerField(null=True, blank=True)
    is_current = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                Least("response_a", "response_b"),
                Greatest("response_a", "response_b"),
                Coalesce("dimension", 0),
                "annotator",
                condition=Q(is_current=True),
                name="preference_one_current",
            ),
            models.CheckConstraint(
                condition=~Q(response_a=models.F("response_b")), name="preference_distinct_sides"
            ),
            models.CheckConstraint(condition=Q(choice__in=Choice.values), name="preference_choice"),
            models.CheckConstraint(
                condition=Q(confidence__isnull=True) | Q(confidence__gte=0, confidence__lte=2),
                name="preference_confidence_range",
            ),
            models.CheckConstraint(
                condition=Q(provider__in=Provider.values), name="preference_provider"
            ),
            models.CheckConstraint(
                condition=Q(slot_order__in=["", "ab", "ba"]), name="preference_slot_order"
            ),
            models.CheckConstraint(
                condition=Q(seconds_spent__isnull=True) | Q(seconds_spent__gte=0),
                name="preference_seconds_non_negative",
            ),
        ]
        indexes = [models.Index(fields=["task", "is_current"])]

    def __str__(self) -> str:
        return f"{self.response_a} vs {self.response_b}: {self.choice}"


class JudgeScore(models.Model):
    """An external evaluator's pointwise score of one response in one run; null when it failed."""

    judge = models.CharField(max_length=200)
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="judge_scores")
    dimension = models.ForeignKey(Dimension, null=True, blank=True, on_delete=models.CASCADE)
    run = models.PositiveIntegerField(default=0)
    score = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "judge", "response", Coalesce("dimension", 0), "run", name="judge_score_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge} on {self.response} run {self.run}: {self.score}"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    # A budget stop is an outcome of its own, not a failure: nothing went wrong, and a resume
    # with a higher budget goes on from where it stopped.
    BUDGET_SPENT = "budget_spent", "Stopped: budget spent"


class Job(models.Model):
    """Any background job. Workers report progress here and the job page polls it."""

    ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
    # The ways a job stops that a resume can pick up from.
    RESUMABLE = (JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.BUDGET_SPENT)

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE)
    kind = models.CharField(max_length=50)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    params = models.JSONField(default=dict, blank=True)
    stage = models.CharField(max_length=100, blank=True, default="")
    result = models.JSONField(default=dict, blank=True)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    error = models.TextField(blank=True, default="")
    cancel_requested = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Who asked for the last cancel (null: nobody in particular, as a superseding run): the
    # creator is told when someone else stopped their job (labeling/notifications.py).
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A lease, for long jobs that one worker runs at a time (labeling.jobs.job_lease_take):
    # who holds it and when it last said it was alive.
    owner = models.CharField(max_length=100, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=JobStatus.values), name="job_status"),
        ]
        # A project's jobs list, newest first.
        indexes = [models.Index(fields=["project", "-created_at"], name="job_project_newest")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def percent(self) -> int | None:
        if not self.total:
            return None
        return min(100, round(100 * self.done / self.total))

    @property
    def eta(self) -> "JobEta | None":
        """The observed rate and the time left, now; None before there is a rate to go by."""
        return job_eta(
            done=self.done, total=self.total, started_at=self.started_at, now=timezone.now()
        )


class QueuePair(models.Model):
    """A pair of responses (and dimension) waiting for labels, with a precomputed priority.

    `block` orders dimension blocks (an annotator finishes one dimension before the next);
    within a block the highest priority is served first. Priorities are recomputed in the
    background by a queue strategy, never per request."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="queue_pairs")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    response_a = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    response_b = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    dimension = models.ForeignKey(Dimension, null=True, blank=True, on_delete=models.CASCADE)
    block = models.PositiveIntegerField(default=0)
    priority = models.FloatField(default=0.0)
    # labeling.strategies.Ranked: the chance the strategy's draw gave the pair, and its pool.
    probability = models.FloatField(null=True, blank=True)
    pool = models.PositiveIntegerField(null=True, blank=True)
    strategy = models.CharField(max_length=50, default="")
    # Labels wanted; null: the project's overlap. A pair with its own overlap was queued as
    # such by another part (a synthesis validation sample): queue_build leaves it alone.
    overlap = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "response_a", "response_b", Coalesce("dimension", 0), name="queue_pair_unique"
            ),
            models.CheckConstraint(
                condition=Q(overlap__isnull=True) | Q(overlap__gte=1), name="queue_pair_overlap"
            ),
            models.CheckConstraint(
                condition=Q(response_a__lt=models.F("response_b")), name="queue_pair_ordered"
            ),
            models.CheckConstraint(
                condition=Q(probability__isnull=True) | Q(probability__gte=0, probability__lte=1),
                name="queue_pair_probability_unit",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.response_a} vs {self.response_b}"


class QueueSlot(models.Model):
    """One of the `overlap` labels a pair should get. A claim is a conditional UPDATE of one free
    slot (unclaimed, or its lease expired), so two annotators can never hold the same slot, and
    the row count of that UPDATE proves the claim on SQLite too. `block` and `priority` are
    copied from the pair so that finding the next slot reads one partial index, no join, and
    `probability` and `pool` so that the claim can record them without reading the pair."""

    pair = models.ForeignKey(QueuePair, on_delete=models.CASCADE, related_name="slots")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    block = models.PositiveIntegerField(default=0)
    priority = models.FloatField(default=0.0)
    probability = models.FloatField(null=True, blank=True)
    pool = models.PositiveIntegerField(null=True, blank=True)
    claimed_by = models.ForeignKey(
        Annotator, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    lease_until = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["project", "block", "-priority", "id"],
                condition=Q(done_at__isnull=True),
                name="queue_slot_open",
            ),
            models.Index(fields=["claimed_by", "pair"], name="queue_slot_claimant"),
        ]

    def __str__(self) -> str:
        return f"slot {self.pk} of {self.pair}"


class QueueAssignment(models.Model):
    """A pair as served to one annotator: which side was shown left, when, and when the label
    came back. Unique per pair and annotator, so nobody is ever served the same pair twice, and
    a late or repeated submission still finds the order its annotator saw."""

    pair = models.ForeignKey(QueuePair, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(Annotator, on_delete=models.CASCADE, related_name="+")
    slot = models.ForeignKey(QueueSlot, on_delete=models.CASCADE, related_name="assignments")
    slot_order = models.CharField(max_length=2)
    # As the claimed slot held them when it was served: the chance of this pick and its pool.
    probability = models.FloatField(null=True, blank=True)
    pool = models.PositiveIntegerField(null=True, blank=True)
    served_at = models.DateTimeField(auto_now_add=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    # Set when the annotator passed the pair on (skipped or flagged it): its slot went back to
    # the queue, and this row keeps the pair from being served to them again.
    skipped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pair", "annotator"], name="queue_assignment_once"),
            models.CheckConstraint(
                condition=Q(slot_order__in=["ab", "ba"]), name="queue_assignment_slot_order"
            ),
        ]
        indexes = [models.Index(fields=["annotator", "-served_at"])]

    def __str__(self) -> str:
        return f"{self.pair} to {self.annotator}"


class FlagReason(models.TextChoices):
    IDENTICAL = "identical", "Responses identical"
    UNCLEAR = "unclear", "Prompt unclear"
    OFFENSIVE = "offensive", "Offensive"
    OTHER = "other", "Other"


class PairFlag(models.Model):
    """An annotator's report that a served pair should not be labeled as it is, with a reason;
    admins resolve it. Flagging also passes the pair on (QueueAssignment.skipped_at)."""

    pair = models.ForeignKey(QueuePair, on_delete=models.CASCADE, related_name="flags")
    annotator = models.ForeignKey(Annotator, on_delete=models.CASCADE, related_name="+")
    reason = models.CharField(max_length=16, choices=FlagReason.choices)
    note = models.TextField(blank=True, default="", max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pair", "annotator"], name="pair_flag_once"),
            models.CheckConstraint(
                condition=Q(reason__in=FlagReason.values), name="pair_flag_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pair} flagged {self.reason} by {self.annotator}"


class LabelSnapshot(models.Model):
    """The state of a project's expert labels at one moment, named by a hash of their content:
    what a search selected on and what an export held, so a grader or a training set can be
    traced to the exact labels behind it. Equal labels give the same snapshot row."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="snapshots")
    content_hash = models.CharField(max_length=64)
    counts = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="label_snapshot_unique_hash"
            ),
        ]

    def __str__(self) -> str:
        return f"snapshot {self.pk} ({self.content_hash[:12]})"


class LabelExport(models.Model):
    """One download of labels for training (labels or chosen/rejected pairs) and the snapshot
    of the labels it held, so a reward model or DPO run can name its exact data."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="label_exports")
    kind = models.CharField(max_length=16)
    snapshot = models.ForeignKey(LabelSnapshot, on_delete=models.PROTECT, related_name="exports")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} export {self.pk} of {self.snapshot}"


# Synthesis (PADME, DESIGN.md section 11): steered preference pairs. These rows are the data,
# whether a synthesis run of this product made them (graders) or an import brought them
# (FORMATS.md "synthesis" and "synthesis_draw" records), so the funnel and the human validation
# read one shape either way. Levels, steering text and votes are never shown to experts, filter
# judges or evaluators.


class Level(models.TextChoices):
    BAD = "bad", "Bad"
    OK = "ok", "OK"
    GOOD = "good", "Good"


LEVEL_ORDER = (Level.BAD, Level.OK, Level.GOOD)


class Synthesis(models.Model):
    """One set of steered pairs: its filter cascade (judge names, in order) and retries R."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="syntheses")
    external_id = models.CharField(max_length=200)
    judges = models.JSONField(default=list)
    retries = models.PositiveSmallIntegerField(default=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="synthesis_unique_id"),
        ]

    def __str__(self) -> str:
        return self.external_id


class SynthesisCell(models.Model):
    """A (task, dimension) rolled out at two of the three levels (its contrast, lower level
    first), by one agent model drawn for the cell. `steering` holds the writer's
    {reasoning, bad, ok, good}; `error` says why a cell could not be filled."""

    synthesis = models.ForeignKey(Synthesis, on_delete=models.CASCADE, related_name="cells")
    external_id = models.CharField(max_length=200)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    dimension = models.ForeignKey(Dimension, on_delete=models.CASCADE, related_name="+")
    low_level = models.CharField(max_length=4, choices=Level.choices)
    high_level = models.CharField(max_length=4, choices=Level.choices)
    agent = models.CharField(max_length=200, blank=True, default="")
    steering = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["external_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["synthesis", "external_id"], name="synthesis_cell_unique_id"
            ),
            models.CheckConstraint(
                condition=Q(low_level=Level.BAD, high_level__in=[Level.OK, Level.GOOD])
                | Q(low_level=Level.OK, high_level=Level.GOOD),
                name="synthesis_cell_contrast",
            ),
        ]

    def __str__(self) -> str:
        return self.external_id

    @property
    def contrast(self) -> str:
        return f"{self.low_level}-{self.high_level}"


class DrawOutcome(models.TextChoices):
    PENDING = "pending", "Pending"
    KEPT = "kept", "Kept"
    VETOED = "vetoed", "Vetoed"
    FAILED = "failed", "Failed"


class SynthesisDraw(models.Model):
    """One try at a cell: retry 0 is its first draw, and a vetoed cell is drawn again with the
    same steering up to its synthesis's retries. The pair (low, high) implies a synthetic
    preference for `high_response` on the cell's dimension."""

    cell = models.ForeignKey(SynthesisCell, on_delete=models.CASCADE, related_name="draws")
    retry = models.PositiveSmallIntegerField()
    low_response = models.ForeignKey(
        Response, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    high_response = models.ForeignKey(
        Response, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    outcome = models.CharField(
        max_length=8, choices=DrawOutcome.choices, default=DrawOutcome.PENDING
    )
    cost = models.FloatField(default=0.0)
    error = models.TextField(blank=True, default="")
    validation_sampled = models.BooleanField(default=False)
    # Calls and tokens per stage, when known: {"steer"|"rollout"|"filter": {"calls": n,
    # "tokens": n}}. The cell's one steering call is counted on its retry-0 draw.
    usage = models.JSONField(default=dict, blank=True)
    # A generated draw's first rollout back, until its pair is: {level: rollout}. Both
    # Responses are then created together, in an order drawn from their hashed ids, so their
    # primary keys (in some expert URLs) say nothing of level or finish order.
    held = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["cell", "retry"]
        constraints = [
            models.UniqueConstraint(fields=["cell", "retry"], name="synthesis_draw_unique_retry"),
            models.CheckConstraint(
                condition=Q(outcome__in=DrawOutcome.values), name="synthesis_draw_outcome"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cell} draw {self.retry}: {self.outcome}"


class SynthesisVote(models.Model):
    """One filter judge's forced choice on a draw, at its place in the cascade. `agrees` is
    whether it chose the constructed label (null: no verdict after its re-asks, a veto);
    `slot_order` 'ab' showed the lower level first; `answers` keeps every raw answer."""

    draw = models.ForeignKey(SynthesisDraw, on_delete=models.CASCADE, related_name="votes")
    position = models.PositiveSmallIntegerField()
    judge = models.CharField(max_length=200)
    agrees = models.BooleanField(null=True)
    slot_order = models.CharField(max_length=2, blank=True, default="")
    answers = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["draw", "position"]
        constraints = [
            models.UniqueConstraint(fields=["draw", "position"], name="synthesis_vote_unique"),
            models.CheckConstraint(
                condition=Q(slot_order__in=["", "ab", "ba"]), name="synthesis_vote_slot_order"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge} on {self.draw}: {self.agrees}"


class Notification(models.Model):
    """Something a user should know about a job they started: it finished, failed, stopped on
    its budget, or someone else cancelled it. One per stop of the job (labeling/notifications.py
    writes it where the job stops); `read_at` is set when the user has seen it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.CASCADE)
    text = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            # The top bar's unread count on every page, and the list newest first.
            models.Index(
                fields=["user"], condition=Q(read_at__isnull=True), name="notification_unread"
            ),
            models.Index(fields=["user", "-created_at"], name="notification_user_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.text}"
