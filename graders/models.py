"""Schema of the grading side: judge endpoints, metagrader programs, grading runs and their
grades, and the judge-call cache that makes a rerun of finished work free."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from graders.engine.selection import DEFAULT_RULE, SelectionRule
from graders.judge_egress import endpoint_egress_check
from labeling.models import (
    Dimension,
    Job,
    LabelSnapshot,
    Project,
    Response,
    Synthesis,
    Task,
)


class ResponseFormat(models.TextChoices):
    JSON_SCHEMA = "json_schema", "JSON schema (OpenAI, vLLM, llama.cpp)"
    JSON_OBJECT = "json_object", "JSON object"
    NONE = "none", "Plain text, parsed leniently"


MAX_JUDGE_TOKENS = 1_000_000
MAX_JUDGE_CONCURRENCY = 1024  # connections one worker process keeps open to the endpoint
MIN_JUDGE_TIMEOUT_S, MAX_JUDGE_TIMEOUT_S = 0.1, 3600.0


class JudgeEndpoint(models.Model):
    """An OpenAI-compatible chat endpoint. The API key is never stored: `api_key_env` names the
    environment variable that holds it on the machines that run the workers."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="judge_endpoints")
    name = models.CharField(max_length=100)
    base_url = models.URLField(max_length=500)
    model = models.CharField(max_length=200)
    api_key_env = models.CharField(max_length=100, blank=True, default="")
    # The validators give the form (and a bundle's import) an error on the field; the check
    # constraints below hold whatever writes the row.
    temperature = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)]
    )
    max_tokens = models.PositiveIntegerField(
        default=1024, validators=[MinValueValidator(1), MaxValueValidator(MAX_JUDGE_TOKENS)]
    )
    max_concurrency = models.PositiveIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_JUDGE_CONCURRENCY)],
        help_text=f"Calls in flight at once, at most {MAX_JUDGE_CONCURRENCY}.",
    )
    timeout_s = models.FloatField(
        default=60.0,
        validators=[MinValueValidator(MIN_JUDGE_TIMEOUT_S), MaxValueValidator(MAX_JUDGE_TIMEOUT_S)],
        help_text=f"Seconds per call, {MIN_JUDGE_TIMEOUT_S:g} to {MAX_JUDGE_TIMEOUT_S:g}.",
    )
    price_in_per_mtok = models.FloatField(default=0.0, validators=[MinValueValidator(0.0)])
    price_out_per_mtok = models.FloatField(default=0.0, validators=[MinValueValidator(0.0)])
    response_format = models.CharField(
        max_length=16, choices=ResponseFormat.choices, default=ResponseFormat.JSON_SCHEMA
    )
    is_local_demo = models.BooleanField(
        default=False, help_text="The bundled 135M model: it shows the mechanics, not quality."
    )
    is_default = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="judge_endpoint_unique_name"),
            models.UniqueConstraint(
                fields=["project"], condition=Q(is_default=True), name="judge_endpoint_one_default"
            ),
            models.CheckConstraint(
                condition=Q(temperature__gte=0, temperature__lte=2), name="judge_temperature"
            ),
            models.CheckConstraint(condition=Q(max_concurrency__gte=1), name="judge_concurrency"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"

    def clean(self) -> None:
        # Where a call may go and which key it may carry (graders/engine/egress.py), the
        # host's addresses looked up now; the judge client checks again on every connection.
        endpoint_egress_check(base_url=self.base_url, api_key_env=self.api_key_env, resolve=True)


class Origin(models.TextChoices):
    BASELINE = "baseline", "Baseline"
    HUMAN = "human", "Written by a person"
    SEARCH = "search", "Found by search"


class Metagrader(models.Model):
    """A metagrader program (graders.engine.programs). Immutable: an edit is a new row whose
    parent is the old one, so every grade stays traceable to the exact program that made it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="metagraders")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20)
    program = models.JSONField()
    content_hash = models.CharField(max_length=64)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    origin = models.CharField(max_length=16, choices=Origin.choices)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="metagrader_unique_program"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class JudgeCall(models.Model):
    """One answered judge request, keyed by the hash of everything that changes the answer.
    This is the cache: a deterministic request found here is never sent again."""

    key = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=200)
    result = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.model} {self.key[:12]}"


class GradingRun(models.Model):
    """Grading a set of tasks with one metagrader and one judge endpoint."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="grading_runs")
    metagrader = models.ForeignKey(Metagrader, on_delete=models.PROTECT, related_name="runs")
    endpoint = models.ForeignKey(JudgeEndpoint, on_delete=models.PROTECT, related_name="runs")
    split = models.CharField(max_length=16, blank=True, default="")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="grading_run")
    # Set for the runs a search makes (a candidate on D_selection, a best-so-far on D_eval);
    # the search's worker runs them, so they are never resumed on their own.
    search = models.ForeignKey(
        "SearchRun", null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    evaluation = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.metagrader} on {self.split or 'chosen tasks'}"


class ItemStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"


class GradingItem(models.Model):
    """One task of a run: the unit a worker claims, so a second delivery finds it taken."""

    run = models.ForeignKey(GradingRun, on_delete=models.CASCADE, related_name="items")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=8, choices=ItemStatus.choices, default=ItemStatus.PENDING)
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "task"], name="grading_item_unique"),
        ]
        indexes = [models.Index(fields=["run", "status"])]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.task_id} {self.status}"


class Grade(models.Model):
    """A response's reward under a run (None when grading failed, with the reason), its
    per-criterion results and the trace of every judge step that produced it."""

    run = models.ForeignKey(GradingRun, on_delete=models.CASCADE, related_name="grades")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="grades")
    reward = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    criteria = models.JSONField(default=list, blank=True)
    trace = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "response"], name="grade_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.response} = {self.reward}"


class SearchMode(models.TextChoices):
    BEST_OF_N = "best_of_n", "Best of N"
    EVOLUTIONARY = "evolutionary", "Evolutionary"


class SelectionRuleChoice(models.TextChoices):
    """The rules of graders/engine/selection.py, in plain words."""

    ARGMAX = SelectionRule.ARGMAX.value, "Argmax: highest accuracy on D_selection (naive)"
    LOWER_BOUND = SelectionRule.LOWER_BOUND.value, "Lower bound: highest low end of the 95% CI"
    P_BEST = SelectionRule.P_BEST.value, "P(best): most often best across task resamples"
    HOLDOUT = SelectionRule.HOLDOUT.value, "Holdout: feedback on four fifths, the pick on the rest"
    THRESHOLDOUT = SelectionRule.THRESHOLDOUT.value, "Reusable holdout (Thresholdout)"


class SearchRun(models.Model):
    """A metagrader search (DESIGN.md section 6): candidates proposed from D_meta, graded on
    D_selection, the best reported on D_eval. Round 0 holds the baseline and `n` proposals;
    an evolutionary search adds `iterations` rounds of `k`. `proposer` is the strong model
    that writes candidates; without one the structured proposer mutates programs."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="searches")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="search_run")
    kind = models.CharField(max_length=20)
    mode = models.CharField(max_length=16, choices=SearchMode.choices)
    endpoint = models.ForeignKey(JudgeEndpoint, on_delete=models.PROTECT, related_name="searches")
    proposer = models.ForeignKey(
        JudgeEndpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    n = models.PositiveIntegerField()
    iterations = models.PositiveIntegerField(default=0)
    k = models.PositiveIntegerField(default=3)
    seed = models.IntegerField(default=0)
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    snapshot = models.ForeignKey(
        LabelSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    selection_rule = models.CharField(
        max_length=16,
        choices=SelectionRuleChoice.choices,
        default=DEFAULT_RULE.value,
        help_text="How the winner is picked and what the proposer is told. The default keeps "
        "about a fifth of D_selection from the proposer and picks there among the two best "
        "by the rest: in bench/selection_overfit.py the accuracy it reports for its pick is "
        "0.02 to 0.03 too high, against 0.10 for the plain argmax, at the same true accuracy "
        "within one standard error.",
    )
    # Set when the search was left to the default rule and ran another (argmax, while
    # D_selection had too few labeled tasks to split): why, for its page.
    selection_note = models.CharField(max_length=200, blank=True)
    # One point per finished round: the best-so-far candidate with its selection and eval
    # accuracy, which is what the overfitting chart draws.
    curve = models.JSONField(default=list, blank=True)
    winner = models.ForeignKey(
        "Candidate", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A re-search (graders/research.py): the grader in use when it started, which competes in
    # round 0 on the new labels and parents that round's proposals; and, when that grader had
    # no search behind it, why the settings are the defaults.
    warm_start = models.ForeignKey(
        Metagrader, null=True, blank=True, on_delete=models.PROTECT, related_name="re_searches"
    )
    warm_start_note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(n__gte=1), name="search_n"),
            models.CheckConstraint(condition=Q(k__gte=1), name="search_k"),
        ]

    def __str__(self) -> str:
        return f"search {self.pk} ({self.kind}, {self.get_mode_display()})"


class CandidateStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    GRADED = "graded", "Graded"
    REJECTED = "rejected", "Rejected"


class Candidate(models.Model):
    """One program a search tried, with where it came from and how it did on D_selection.
    A proposal the model could not make valid is kept as a rejected candidate, without a
    program, so its prompt and raw answer stay readable."""

    search = models.ForeignKey(SearchRun, on_delete=models.CASCADE, related_name="candidates")
    metagrader = models.ForeignKey(
        Metagrader, null=True, blank=True, on_delete=models.PROTECT, related_name="candidacies"
    )
    iteration = models.PositiveIntegerField()
    position = models.PositiveIntegerField()
    status = models.CharField(
        max_length=10, choices=CandidateStatus.choices, default=CandidateStatus.PROPOSED
    )
    lineage = models.CharField(max_length=500, blank=True, default="")
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    prompt = models.TextField(blank=True, default="")
    raw = models.TextField(blank=True, default="")
    errors = models.JSONField(default=list, blank=True)
    rejected = models.TextField(blank=True, default="")
    selection_run = models.OneToOneField(
        GradingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="candidate"
    )
    eval_run = models.ForeignKey(
        GradingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Tolerant ranking accuracy on all of D_selection (what the leaderboard ranks by); None
    # until graded, or when nothing could be compared.
    score = models.FloatField(null=True, blank=True)
    # What the search's selection rule told the proposer about this candidate, and the value
    # its pick ranked it by (None outside a holdout rule's shortlist): graders/candidates.py.
    feedback_score = models.FloatField(null=True, blank=True)
    pick_score = models.FloatField(null=True, blank=True)
    calls_per_response = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["iteration", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["search", "iteration", "position"], name="candidate_unique_slot"
            ),
            models.UniqueConstraint(
                fields=["search", "metagrader"], name="candidate_unique_program"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.search_id}/{self.iteration}.{self.position} {self.metagrader}"


class GraderSelection(models.Model):
    """The project's selected grader of a kind, versioned: promoting a candidate adds a row,
    and the newest row per kind is the one in use."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="selections")
    kind = models.CharField(max_length=20)
    version = models.PositiveIntegerField()
    metagrader = models.ForeignKey(Metagrader, on_delete=models.PROTECT, related_name="selections")
    search = models.ForeignKey(
        SearchRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    selected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    selected_at = models.DateTimeField(auto_now_add=True)
    note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["kind", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "kind", "version"], name="grader_selection_unique_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} v{self.version}: {self.metagrader}"


class TokenScope(models.TextChoices):
    REWARD = "reward", "Call the reward API"
    EXPORT = "export", "Download grader bundles and label exports"
    CAPTURE = "capture", "Send production rollouts for capture"


class ApiToken(models.Model):
    """A project's machine credential for training jobs. Only a hash of the secret is stored;
    the secret is shown once, when the token is made. `prefix` (the secret's first characters)
    lets people tell tokens apart in lists and logs."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    secret_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    rate_per_minute = models.PositiveIntegerField(default=600)
    # The share of graded groups the reward API captures for this token; null: the project's
    # capture_rate. 0 turns capture off for the token.
    capture_rate = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of graded groups to capture (0 to 1); empty: the project's rate.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(capture_rate__isnull=True)
                | Q(capture_rate__gte=0, capture_rate__lte=1),
                name="token_capture_rate",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class GraderExport(models.Model):
    """One download of a grader bundle: when, by whom or by which token, and with the label
    snapshot it was selected on. The lineage a team reads to tell which training runs a
    grader fed."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="exports")
    metagrader = models.ForeignKey(Metagrader, on_delete=models.CASCADE, related_name="exports")
    snapshot = models.ForeignKey(
        LabelSnapshot,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="grader_exports",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="exports"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} export {self.pk}"


class RewardUsage(models.Model):
    """Reward API calls per grader and token: how many requests and responses it scored."""

    metagrader = models.ForeignKey(
        Metagrader, on_delete=models.CASCADE, related_name="reward_usage"
    )
    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="reward_usage")
    requests = models.PositiveBigIntegerField(default=0)
    responses = models.PositiveBigIntegerField(default=0)
    first_at = models.DateTimeField(auto_now_add=True)
    last_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["metagrader", "token"], name="reward_usage_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.metagrader_id}/{self.token_id}: {self.requests}"


class RolloutMode(models.TextChoices):
    SINGLE = "single", "Single response to the task prompt"
    CONVERSATION = "conversation", "Conversation with a simulated user"
    HARNESS = "harness", "Own harness: export jobs, import trajectories"
    WEBHOOK = "webhook", "Own harness: a rollout webhook"


class SynthesisRun(models.Model):
    """A synthesis this product generates (DESIGN.md section 11): which dimensions and tasks,
    the agent endpoints (one drawn per cell with the seed), the steering writer, the filter
    cascade (SynthesisRunJudge, in order), retries R, the rollout mode and the budget. The
    cells, draws and votes it makes are the rows of `synthesis`, the same shape an import
    gives."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="synthesis_runs")
    synthesis = models.OneToOneField(Synthesis, on_delete=models.CASCADE, related_name="run")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="synthesis_run")
    dimensions = models.ManyToManyField(Dimension, related_name="+")
    # The task scope: a split, a domain, or (both empty) every task of the project.
    split = models.CharField(max_length=16, blank=True, default="")
    domain = models.CharField(max_length=100, blank=True, default="")
    agents = models.ManyToManyField(JudgeEndpoint, related_name="+")
    writer = models.ForeignKey(JudgeEndpoint, on_delete=models.PROTECT, related_name="+")
    retries = models.PositiveSmallIntegerField(default=2)
    mode = models.CharField(max_length=16, choices=RolloutMode.choices, default=RolloutMode.SINGLE)
    user_simulator = models.ForeignKey(
        JudgeEndpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    turn_cap = models.PositiveSmallIntegerField(default=8)
    webhook_url = models.URLField(max_length=500, blank=True, default="")
    seed = models.IntegerField(default=0)
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(mode__in=RolloutMode.values), name="synthesis_run_mode"
            ),
            models.CheckConstraint(
                condition=Q(split="") | Q(domain=""), name="synthesis_run_one_scope"
            ),
            models.CheckConstraint(
                condition=~Q(mode=RolloutMode.CONVERSATION) | Q(user_simulator__isnull=False),
                name="synthesis_run_conversation_user",
            ),
            models.CheckConstraint(
                condition=~Q(mode=RolloutMode.WEBHOOK) | ~Q(webhook_url=""),
                name="synthesis_run_webhook_url",
            ),
        ]

    def __str__(self) -> str:
        return f"synthesis run {self.pk} ({self.synthesis})"

    @property
    def scope(self) -> str:
        if self.split:
            return f"split {self.split}"
        if self.domain:
            return f"domain {self.domain}"
        return "all tasks"


class SynthesisRunJudge(models.Model):
    """One filter judge of a run's cascade, at its place (0 first)."""

    run = models.ForeignKey(SynthesisRun, on_delete=models.CASCADE, related_name="cascade")
    endpoint = models.ForeignKey(JudgeEndpoint, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="synthesis_judge_position"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: judge {self.position} {self.endpoint_id}"


class SynthesisSweep(models.Model):
    """An evaluator sweep (PADME section 5.3, DESIGN.md section 11): each response of a
    synthesis's kept pairs scored alone on its cell's dimension by each evaluator, `runs`
    times. `evaluators` lists them as {"name", "endpoint", "metagrader"}: a judge endpoint with
    the evaluator prompt (metagrader null) or a scalar metagrader's program run on the
    endpoint. Scores are labeling.JudgeScore rows under the evaluator's `name`, fixed when the
    sweep starts, so the meta-evaluation ranks them and a renamed endpoint splits nothing."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sweeps")
    synthesis = models.ForeignKey(Synthesis, on_delete=models.CASCADE, related_name="sweeps")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="synthesis_sweep")
    evaluators = models.JSONField()
    runs = models.PositiveSmallIntegerField(default=3)
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [models.CheckConstraint(condition=Q(runs__gte=1), name="sweep_runs")]

    def __str__(self) -> str:
        return f"sweep {self.pk} of {self.synthesis}"


class GraderAlias(models.Model):
    """A name trainers address a grader by (`production`, `staging`, ...), pointing at one
    version. Moved only by graders/aliases.py, which records every move as an AliasMove. The
    kind is fixed by the first promotion: a trainer set up for a scalar grader (per-sample
    verl, say) must not wake up to a pairwise one."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="grader_aliases")
    name = models.CharField(max_length=50)
    kind = models.CharField(max_length=20)
    metagrader = models.ForeignKey(Metagrader, on_delete=models.PROTECT, related_name="aliases")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="grader_alias_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} -> {self.metagrader_id}"


class AliasMoveKind(models.TextChoices):
    PROMOTE = "promote", "Promoted"
    ROLLBACK = "rollback", "Rolled back"


class AliasMove(models.Model):
    """One move of an alias: who, when, from which version (null on first use) to which, and
    why. The history is append-only; a rollback is a move too."""

    alias = models.ForeignKey(GraderAlias, on_delete=models.CASCADE, related_name="moves")
    kind = models.CharField(max_length=10, choices=AliasMoveKind.choices)
    from_metagrader = models.ForeignKey(
        Metagrader, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    to_metagrader = models.ForeignKey(Metagrader, on_delete=models.PROTECT, related_name="+")
    moved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    moved_at = models.DateTimeField(auto_now_add=True)
    note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-moved_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=AliasMoveKind.values), name="alias_move_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.alias.name}: {self.from_metagrader_id} -> {self.to_metagrader_id}"


# Capture (DESIGN.md section 12): groups of rollouts that training sent for grading, kept so
# experts can label what the policy now produces. The rollouts themselves are labeling
# Responses (so the queue serves them like any pair); where they came from (run, step, token,
# grader, reward) lives only here, in tables the label and task pages never read.


class CaptureSource(models.TextChoices):
    REWARD = "reward", "Reward API"
    GET_REWARD = "get_reward", "OpenRLHF get_reward"
    BULK = "bulk", "Bulk capture log"


class CaptureReservoir(models.Model):
    """A task's reservoir of captured groups: how many groups have been offered so far, which
    reservoir sampling needs to give the n-th group its K/n chance. The row is locked while a
    group is stored, so concurrent captures of one task count and place in turn."""

    task = models.OneToOneField(Task, on_delete=models.CASCADE, related_name="+")
    groups_seen = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"reservoir of {self.task_id}: {self.groups_seen} seen"


class CapturedGroup(models.Model):
    """One captured group: responses to one task graded together, with the run and step the
    trainer named. `slot` is its place in the task's reservoir; a group pushed out of the
    reservoir whose responses experts had labeled keeps its rows with slot null (labels are
    never deleted to make room)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    slot = models.PositiveIntegerField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=CaptureSource.choices)
    metagrader = models.ForeignKey(
        Metagrader, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    run = models.CharField(max_length=200, blank=True, default="")
    step = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "slot"], condition=Q(slot__isnull=False), name="capture_slot_once"
            ),
            models.CheckConstraint(
                condition=Q(source__in=CaptureSource.values), name="capture_source"
            ),
        ]
        indexes = [models.Index(fields=["project", "run", "step"], name="capture_run_step")]

    def __str__(self) -> str:
        return f"capture {self.pk} of {self.task_id} (run {self.run!r}, step {self.step})"


class CapturedResponse(models.Model):
    """A captured Response: its group, the reward it was given (null: grading failed or the
    log gave none) and the hash of its content, unique per task so a rollout captured once is
    never stored twice."""

    group = models.ForeignKey(CapturedGroup, on_delete=models.CASCADE, related_name="members")
    response = models.OneToOneField(Response, on_delete=models.CASCADE, related_name="capture")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    content_hash = models.CharField(max_length=64)
    reward = models.FloatField(null=True, blank=True)
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["group", "position"]
        constraints = [
            models.UniqueConstraint(fields=["task", "content_hash"], name="capture_content_once"),
        ]

    def __str__(self) -> str:
        return f"{self.response_id} in capture {self.group_id}"
