"""OpenRLHF's get_reward, gathered: `?group_size=N` makes the reward API collect a prompt's
samples from separate requests into one group, grade the group once, and answer each request
with its own sample's reward. OpenRLHF 0.11 posts one sample per request (aiohttp, 180 s
total, up to 5 tries a second apart), so a pairwise grader behind get_reward otherwise sees
groups of one and fails every grade.

The requests of a group may reach different processes (gunicorn's workers, or machines), so
they meet in Django's cache, which is shared whenever more than one process serves
(gunicorn.conf.py refuses several workers without CACHE_URL); one process alone works on its
in-memory cache. Per group, with atomic cache operations only (add, incr):

- a counter gives each arriving sample a place: batch = place // N, index = place % N;
- the sample is stored under (batch, index), then counted as written; the request whose
  count reaches N grades the batch (every sample is stored by then);
- otherwise it polls for the batch's result; once `wait_s` has passed since the batch opened,
  the first to claim the batch (cache.add) closes it and grades the samples stored so far, or
  refuses them (`partial=refuse`: 409 for each, no judge call);
- a closer publishes the indices it took before it grades; a sample stored too late for its
  batch joins the next one.

Samples are of one group when they have the same grader version, prompt, label and run. Each
request holds a worker thread while it waits: the server needs threads (WEB_CONCURRENCY x
WEB_THREADS) for the samples OpenRLHF keeps in flight, or groups time out unfilled."""

import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status
from rest_framework.exceptions import APIException

from graders.engine.trainers.openrlhf import (
    PARTIAL_CHOICES,
    PARTIAL_REFUSE,
    SPECIAL_TOKENS,
    strip_special_tokens,
)
from graders.models import ApiToken, Metagrader
from graders.reward_grading import RequestJudgeCache, openrlhf_score

MAX_GROUP = 64  # the reward endpoint's MAX_RESPONSES: one group
# The longest wait a request may ask for, and how long its group may then take to grade:
# together within OpenRLHF's 180 s per request.
MAX_WAIT_S = 120.0
GRADE_WAIT_S = 55.0
POLL_S = (0.01, 0.1)  # first and longest pause between looks at the cache
REJOINS = 3  # batches a sample may arrive too late for before it gives up
NO_SPECIAL_TOKENS = "none"


class GroupIncomplete(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "group_incomplete"


class GroupNotGraded(APIException):
    status_code = status.HTTP_504_GATEWAY_TIMEOUT
    default_code = "group_not_graded"


class GatherIn(serializers.Serializer):
    """get_reward's query parameters (OpenRLHF's --remote_rm_url may carry a query string; it
    splits the URL on commas only)."""

    group_size = serializers.IntegerField(required=False, min_value=1, max_value=MAX_GROUP)
    wait_s = serializers.FloatField(required=False, default=30.0, min_value=0, max_value=MAX_WAIT_S)
    partial = serializers.ChoiceField(choices=PARTIAL_CHOICES, required=False, default="grade")
    special_tokens = serializers.ListField(
        child=serializers.CharField(trim_whitespace=False, max_length=100),
        required=False,
        max_length=50,
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        given = data.get("special_tokens")
        if given is None:
            data["special_tokens"] = SPECIAL_TOKENS
        elif given == [NO_SPECIAL_TOKENS]:
            data["special_tokens"] = ()
        return data


GATHER_PARAMETERS = [
    OpenApiParameter(
        "group_size", OpenApiTypes.INT, OpenApiParameter.QUERY,
        description="Gather this many samples of a prompt (same prompt and label) from "
        "separate requests, each of one query, and grade them together as one group: what a "
        "pairwise grader needs when OpenRLHF posts one sample per request "
        "(--rollout.n_samples_per_prompt). Each request answers its own sample's reward.",
    ),
    OpenApiParameter(
        "wait_s", OpenApiTypes.FLOAT, OpenApiParameter.QUERY, default=30.0,
        description=f"With group_size: seconds (at most {MAX_WAIT_S:g}) after a group's first "
        "sample arrived before it is graded as it stands or refused (partial).",
    ),
    OpenApiParameter(
        "partial", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=list(PARTIAL_CHOICES),
        default="grade",
        description="With group_size: a group not filled within wait_s is graded as it stands "
        "(grade; extra_logs.group_incomplete is 1.0) or refused (refuse: 409, no judge call).",
    ),
    OpenApiParameter(
        "special_tokens", OpenApiTypes.STR, OpenApiParameter.QUERY, many=True,
        description="Text taken out of each response before grading, repeatable; default the "
        f"end-of-turn tokens {', '.join(SPECIAL_TOKENS)}; '{NO_SPECIAL_TOKENS}' keeps all.",
    ),
]  # fmt: skip


@dataclass(frozen=True)
class GetRewardAnswer:
    """What a get_reward request answers (its own queries), the judge answers it has to store
    (None when another request graded its group), and the group it graded, for capture."""

    payload: dict[str, Any]
    answers: RequestJudgeCache | None
    graded: tuple[Mapping[str, Any], Mapping[str, Any]] | None


def get_reward_answer(
    *, metagrader: Metagrader, token: ApiToken, data: Mapping[str, Any], options: Mapping[str, Any]
) -> GetRewardAnswer:
    """get_reward for validated GetRewardIn `data` and GatherIn `options`: the request's own
    batch graded, or with group_size its one sample gathered into a group."""
    tokens = options["special_tokens"]
    if "group_size" not in options:
        payload, answers = openrlhf_score(metagrader=metagrader, data=data, special_tokens=tokens)
        return GetRewardAnswer(payload, answers, (_as_graded(data, tokens), payload))
    if len(data["query"]) != 1:
        raise serializers.ValidationError(
            {
                "query": [
                    "With group_size, send one query per request; a batch is graded by "
                    "prompt without it."
                ]
            }
        )
    return _Gathering(metagrader, token, data, options).answer()


class _Rejoin(Exception):
    """The sample was stored too late for its batch."""


class _Gathering:
    def __init__(
        self,
        metagrader: Metagrader,
        token: ApiToken,
        data: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> None:
        self.metagrader = metagrader
        self.size: int = options["group_size"]
        self.wait_s: float = options["wait_s"]
        self.refuse = options["partial"] == PARTIAL_REFUSE
        self.tokens: Sequence[str] = options["special_tokens"]
        self.sample = {
            "query": data["query"][0],
            "prompt": data["prompts"][0],
            "label": data["labels"][0],
        }
        identity = [
            metagrader.pk,
            metagrader.content_hash,
            token.project_id,
            self.size,
            self.sample["prompt"],
            self.sample["label"],
            data.get("run"),
            list(self.tokens),
        ]
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self.base = f"reward-gather:{digest[:40]}"
        self.ttl = math.ceil(self.wait_s + GRADE_WAIT_S + 60)
        self.run_step = {name: data[name] for name in ("run", "step") if name in data}

    def answer(self) -> GetRewardAnswer:
        for _ in range(REJOINS):
            place = _count(f"{self.base}:places", 2 * self.ttl) - 1
            batch, index = divmod(place, self.size)
            key = f"{self.base}:{batch}"
            cache.add(f"{key}:opened", time.time(), self.ttl)
            cache.set(f"{key}:s{index}", self.sample, self.ttl)
            written = _count(f"{key}:written", self.ttl)
            try:
                if written == self.size and cache.add(f"{key}:closed", 1, self.ttl):
                    return self._grade(key, index, complete=True)
                return self._wait(key, index)
            except _Rejoin:
                continue
        raise GroupNotGraded(
            f"This sample arrived too late for {REJOINS} groups in a row (each closed by "
            "wait_s before it was stored); the server may be overloaded."
        )

    def _wait(self, key: str, index: int) -> GetRewardAnswer:
        opened = float(cache.get(f"{key}:opened", time.time()))
        pause = POLL_S[0]
        while True:
            seen = cache.get_many([f"{key}:members", f"{key}:result"])
            result, members = seen.get(f"{key}:result"), seen.get(f"{key}:members")
            if (members is not None and index not in members) or (
                result is not None and index not in result["members"]
            ):
                raise _Rejoin
            if result is not None:
                return self._own(result, index)
            now = time.time()
            if now >= opened + self.wait_s and cache.add(f"{key}:closed", 1, self.ttl):
                return self._grade(key, index, complete=False)
            if now >= opened + self.wait_s + GRADE_WAIT_S:
                raise GroupNotGraded(
                    f"The group of this sample was not graded within {GRADE_WAIT_S:g} s of "
                    "closing (its grading request failed or the judge is slow)."
                )
            time.sleep(pause)
            pause = min(pause * 1.5, POLL_S[1])

    def _grade(self, key: str, index: int, *, complete: bool) -> GetRewardAnswer:
        """Close the batch: take the samples stored so far, say which, grade them as a group
        (or refuse them) and publish each one's outcome."""
        stored = cache.get_many([f"{key}:s{i}" for i in range(self.size)])
        members = sorted(int(name.rsplit(":s", 1)[1]) for name in stored)
        cache.set(f"{key}:members", members, self.ttl)
        rows = [stored[f"{key}:s{i}"] for i in members]
        result: dict[str, Any] = {"members": members, "incomplete": not complete}
        try:
            if not complete and self.refuse:
                raise GroupIncomplete(
                    f"The group of this sample held {len(members)} of {self.size} samples when "
                    f"wait_s ({self.wait_s:g} s) ran out, and partial=refuse."
                )
            group = {
                "query": [r["query"] for r in rows],
                "prompts": [r["prompt"] for r in rows],
                "labels": [r["label"] for r in rows],
                **self.run_step,
            }
            payload, answers = openrlhf_score(
                metagrader=self.metagrader, data=group, special_tokens=self.tokens
            )
        except APIException as exc:
            result["error"] = {"status": exc.status_code, "detail": str(exc.detail)}
            cache.set(f"{key}:result", result, self.ttl)
            raise
        except Exception as exc:
            result["error"] = {"status": 500, "detail": f"Grading the group failed: {exc}"}
            cache.set(f"{key}:result", result, self.ttl)
            raise
        result["rewards"] = payload["rewards"]
        result["failed"] = payload["extra_logs"]["grader_failed"]
        cache.set(f"{key}:result", result, self.ttl)
        graded = (_as_graded(group, self.tokens), payload)
        return GetRewardAnswer(self._own(result, index).payload, answers, graded)

    def _own(self, result: Mapping[str, Any], index: int) -> GetRewardAnswer:
        if "error" in result:
            failure = APIException(result["error"]["detail"])
            failure.status_code = result["error"]["status"]
            raise failure
        row = result["members"].index(index)
        reward = result["rewards"][row]
        logs = {
            "grader_failed": [result["failed"][row]],
            "group_incomplete": [float(result["incomplete"])],
        }
        return GetRewardAnswer(
            {"rewards": [reward], "scores": [reward], "extra_logs": logs}, None, None
        )


def _as_graded(data: Mapping[str, Any], tokens: Sequence[str]) -> Mapping[str, Any]:
    """`data` with each response as the judge read it (special tokens out), for capture."""
    queries = [
        prompt + strip_special_tokens(query[len(prompt) :], tokens)
        for query, prompt in zip(data["query"], data["prompts"], strict=True)
    ]
    return {**data, "query": queries}


def _count(key: str, ttl: int) -> int:
    """Add one to the counter `key` (made with the given lifetime if absent), atomically."""
    cache.add(key, 0, ttl)
    try:
        value = cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.add(key, 0, ttl)
        value = cache.incr(key)
    cache.touch(key, ttl)
    return int(value)
