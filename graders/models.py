"""Schema of the grading side: judge endpoints, metagrader programs, grading runs and their
grades, and the judge-call cache that makes a rerun of finished work free."""

from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from labeling.models import Job, Project, Response, Task


def api_key_env_allowed(name: str) -> bool:
    return name in settings.JUDGE_API_KEY_ENV_ALLOWED or (
        bool(settings.JUDGE_API_KEY_ENV_PREFIX)
        and name.startswith(settings.JUDGE_API_KEY_ENV_PREFIX)
    )


def api_key_env_check(name: str) -> None:
    """Only operator-approved variables may be sent to a judge as its key."""
    if name and not api_key_env_allowed(name):
        raise ValidationError(
            {
                "api_key_env": f"{name!r} is not an allowed key variable: use one of "
                f"{', '.join(settings.JUDGE_API_KEY_ENV_ALLOWED)} or a name starting with "
                f"{settings.JUDGE_API_KEY_ENV_PREFIX} (JUDGE_API_KEY_ENV_ALLOWED and "
                "JUDGE_API_KEY_ENV_PREFIX set these)."
            }
        )


def base_url_check(url: str) -> None:
    """Only operator-approved hosts, when the operator names any (JUDGE_BASE_URL_HOSTS)."""
    host = urlsplit(url).hostname or ""
    if settings.JUDGE_BASE_URL_HOSTS and host not in settings.JUDGE_BASE_URL_HOSTS:
        raise ValidationError(
            {
                "base_url": f"{host or url!r} is not an allowed judge host: use one of "
                f"{', '.join(settings.JUDGE_BASE_URL_HOSTS)} (JUDGE_BASE_URL_HOSTS sets them)."
            }
        )


class ResponseFormat(models.TextChoices):
    JSON_SCHEMA = "json_schema", "JSON schema (OpenAI, vLLM, llama.cpp)"
    JSON_OBJECT = "json_object", "JSON object"
    NONE = "none", "Plain text, parsed leniently"


class JudgeEndpoint(models.Model):
    """An OpenAI-compatible chat endpoint. The API key is never stored: `api_key_env` names the
    environment variable that holds it on the machines that run the workers."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="judge_endpoints")
    name = models.CharField(max_length=100)
    base_url = models.URLField(max_length=500)
    model = models.CharField(max_length=200)
    api_key_env = models.CharField(max_length=100, blank=True, default="")
    temperature = models.FloatField(default=0.0)
    max_tokens = models.PositiveIntegerField(default=1024)
    max_concurrency = models.PositiveIntegerField(default=8)
    timeout_s = models.FloatField(default=60.0)
    price_in_per_mtok = models.FloatField(default=0.0)
    price_out_per_mtok = models.FloatField(default=0.0)
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
        api_key_env_check(self.api_key_env)
        base_url_check(self.base_url)


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
