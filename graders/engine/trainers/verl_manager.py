"""verl >= 0.9: a reward manager that grades a prompt's responses together, for pairwise graders.

verl's reward loop hands a reward manager one response at a time (`run_single`), from every
rollout as it finishes or from a whole batch at once. WorkbenchGroupRewardManager holds each
response until the other responses with its uid (the `actor_rollout_ref.rollout.n` samples of
one prompt) have arrived, grades them as one group through the group form of compute_score
(`verl_compute_score_async(grader, batch=True)`, which the reward file names as usual), and
answers each response with its own score. verl loads it by import:

    reward.reward_manager.source=importlib
    reward.reward_manager.name=WorkbenchGroupRewardManager
    reward.reward_manager.module.path=pkg://graders.engine.trainers.verl_manager
    reward.num_workers=1

What cannot give whole groups is refused when verl builds the manager (trainer start), with
the reason: more than one reward worker (verl sends each response to a worker of its choice,
so a group's responses can land on different workers), rollout.n below 2, more responses per
training step than Ray runs calls at once on the worker (each waiting response holds a call),
validation with a different number of samples per prompt than training, and a compute_score
that is not a group form. A group still short of members after `group_wait_s` seconds
(reward.reward_kwargs; default 600) is graded as it stands.

The module imports nothing of verl until verl calls it, so that the runtime imports without it;
the manager follows verl's RewardManagerBase protocol (`run_single`, `assemble_rm_scores`).
"""

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

GROUP_WAIT_KEY = "group_wait_s"
DEFAULT_GROUP_WAIT_S = 600.0
# Ray runs at most this many calls at once on an async actor (its default max_concurrency),
# and verl does not raise it for reward workers: a response waiting for its group holds one.
RAY_ACTOR_CALLS = 1000


@dataclass
class _Sample:
    data_source: Any
    solution_str: str
    ground_truth: Any
    extra_info: Mapping[str, Any]


@dataclass
class _Group:
    samples: list[_Sample] = field(default_factory=list)
    answers: list["asyncio.Future[dict[str, Any]]"] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class WorkbenchGroupRewardManager:
    """verl's reward manager for group-form compute_score functions (module docstring)."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Callable[..., Any] | None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.group_size = int(config.actor_rollout_ref.rollout.n)
        self.compute_score = _startup_check(config, compute_score, self.group_size)
        self.is_async = inspect.iscoroutinefunction(self.compute_score)
        reward_kwargs = config.reward.get("reward_kwargs") or {}
        self.group_wait_s = float(reward_kwargs.get(GROUP_WAIT_KEY, DEFAULT_GROUP_WAIT_S))
        self._groups: dict[str, _Group] = {}
        self._grading: set[asyncio.Task[None]] = set()

    @classmethod
    def assemble_rm_scores(cls, data: Any, scores: list[float]) -> Any:
        """verl's own placement of each score on the response's last token."""
        base = importlib.import_module("verl.experimental.reward_loop.reward_manager.base")
        return base.RewardManagerBase.assemble_rm_scores(data, scores)

    async def run_single(self, data: Any) -> dict[str, Any]:
        item = data[-1:][0]  # multi-sequence outputs: the last sequence, as verl's managers do
        response_ids = item.batch["responses"]
        valid_length = item.batch["attention_mask"][-response_ids.shape[-1] :].sum()
        sample = _Sample(
            data_source=item.non_tensor_batch["data_source"],
            solution_str=self.tokenizer.decode(
                response_ids[:valid_length], skip_special_tokens=True
            ),
            ground_truth=item.non_tensor_batch["reward_model"]["ground_truth"],
            extra_info=item.non_tensor_batch.get("extra_info") or {},
        )
        score = await self._join(str(item.non_tensor_batch["uid"]), sample)
        return {"reward_score": score["score"], "reward_extra_info": score}

    async def _join(self, uid: str, sample: _Sample) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        group = self._groups.get(uid)
        if group is None:
            group = self._groups[uid] = _Group()
            group.timer = loop.call_later(self.group_wait_s, self._close, uid)
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        group.samples.append(sample)
        group.answers.append(answer)
        if len(group.samples) >= self.group_size:
            self._close(uid)
        return await answer

    def _close(self, uid: str) -> None:
        group = self._groups.pop(uid, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._grade(group))
        self._grading.add(task)
        task.add_done_callback(self._grading.discard)

    async def _grade(self, group: _Group) -> None:
        try:
            scores = await self._scores(group.samples)
            if len(scores) != len(group.samples):
                raise ValueError(f"{len(scores)} scores for {len(group.samples)} responses")
        except Exception as error:
            for answer in group.answers:
                if not answer.done():  # a caller that gave up (a timeout) has cancelled its own
                    answer.set_exception(error)
            return
        for answer, score in zip(group.answers, scores, strict=True):
            if not answer.done():
                answer.set_result(dict(score))

    async def _scores(self, samples: list[_Sample]) -> list[Mapping[str, Any]]:
        call = functools.partial(
            self.compute_score,
            data_sources=[s.data_source for s in samples],
            solution_strs=[s.solution_str for s in samples],
            ground_truths=[s.ground_truth for s in samples],
            extra_infos=[s.extra_info for s in samples],
        )
        if self.is_async:
            result: list[Mapping[str, Any]] = await call()
            return result
        return await asyncio.get_running_loop().run_in_executor(None, call)


def _startup_check(
    config: Any, compute_score: Callable[..., Any] | None, group_size: int
) -> Callable[..., Any]:
    """The group-form compute_score, or ValueError naming every reason this setup cannot see
    whole groups."""
    problems = []
    workers = int(config.reward.num_workers)
    if workers != 1:
        problems.append(
            f"reward.num_workers={workers}: verl sends each response to a reward worker of its "
            "choice, so a prompt's responses can land on different workers; set "
            "reward.num_workers=1 (one worker keeps many judge calls in flight)"
        )
    if group_size < 2:
        problems.append(
            f"actor_rollout_ref.rollout.n={group_size}: a pairwise grader needs at least 2 "
            "responses per prompt"
        )
    in_flight = int(config.data.train_batch_size) * group_size
    if in_flight > RAY_ACTOR_CALLS:
        problems.append(
            f"data.train_batch_size x rollout.n = {in_flight} responses can wait for their "
            f"groups at once, more than the {RAY_ACTOR_CALLS} calls Ray runs at a time on the "
            "reward worker, so a group's last responses could queue behind waiting ones and "
            f"groups would be graded in pieces; keep it at most {RAY_ACTOR_CALLS}"
        )
    validation_n = int(config.actor_rollout_ref.rollout.val_kwargs.n)
    trainer = config.trainer
    validates = bool(trainer.get("val_before_train")) or int(trainer.get("test_freq", -1)) > 0
    if validates and validation_n != group_size:
        problems.append(
            f"validation samples actor_rollout_ref.rollout.val_kwargs.n={validation_n} "
            f"responses per prompt and training rollout.n={group_size}: set them equal, or "
            "turn validation off (trainer.val_before_train=False trainer.test_freq=-1)"
        )
    if compute_score is None or not _takes_groups(compute_score):
        problems.append(
            "compute_score is not a group form: point reward.custom_reward_function at "
            "verl_compute_score_async(grader, batch=True) (or any function of data_sources, "
            "solution_strs, ground_truths, extra_infos)"
        )
    if problems or compute_score is None:
        reasons = "; ".join(problems)
        raise ValueError(f"WorkbenchGroupRewardManager cannot grade whole groups: {reasons}")
    return compute_score


def _takes_groups(function: Callable[..., Any]) -> bool:
    """Whether a compute_score takes lists (solution_strs); verl wraps the function it loads in
    a functools.partial whose first argument is that function."""
    while isinstance(function, functools.partial):
        function = next((arg for arg in function.args if callable(arg)), function.func)
    try:
        return "solution_strs" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
