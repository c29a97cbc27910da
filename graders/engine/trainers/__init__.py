"""Reward functions for RL trainers (TRL, verl, OpenRLHF), built on a bundle's Grader.

Each adapter turns a trainer's batch into groups of responses to one task, grades every group
concurrently through the Grader (bundle.py), and maps a failed grade (reward None) to
`failure_reward`, reporting the failures where the trainer can show them. The calling
conventions below are those of the trainers' current documentation and source; docs/trainers.md
has copy-paste examples.

- TRL GRPOTrainer calls each reward function with keyword arguments `prompts`, `completions`,
  `completion_ids`, `trainer_state` and every dataset column except `prompt`, and expects one
  float (or None, "not applicable") per completion. The batch holds `num_generations`
  completions of each prompt side by side; each block is graded as a group, which is what lets
  pairwise programs give win rates. A process may hold only part of a group when
  per-device batches are not multiples of `num_generations`; pairwise programs refuse that.
  TRL awaits async reward functions on its own event loop: see TRLReward.as_async
  (TRLAsyncReward, which pickles for AsyncGRPOTrainer's spawned worker). When TRL passes
  `log_metric`, the share of failed grades is logged through it.
- verl (>= 0.9) calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`
  once per response from its reward loop's managers ("naive", "rate_limited", ...), awaiting
  it if it is a coroutine function and running it in a thread otherwise. verl does not pass the
  prompt, so the task comes from `extra_info` ("task_id", or "prompt" with optional "documents"
  and "instructions"). Pairwise programs need the group form (`batch=True`): on verl >= 0.9
  under WorkbenchGroupRewardManager (verl_manager.py), which gathers a prompt's responses by
  uid; on verl 0.7-0.8 under the legacy "batch" manager (reward_model.use_reward_loop=False).
- OpenRLHF calls `reward_func(queries, prompts, labels)` where a query is the prompt followed by
  the response (special tokens decoded as text, which is taken out), and reads {"rewards",
  "scores", "extra_logs"}; it loads the function from the file given as --remote_rm_url
  (--reward.remote_url in current releases). Current releases call it with one sample at a
  time from threads; with `group_size` the function gathers a prompt's samples into groups,
  which pairwise programs need (refused without it).

Each adapter takes a Grader or a FollowedGrader (follow.py, a workbench alias): the version is
picked once per call (`grader_now`), before any group of the call is graded, so a switch of
the alias falls between calls. Where a call holds whole groups (TRL, verl's group form, a
batch given to OpenRLHF's function) every group is graded by one version. A per-sample call
holds one response, so a switch may fall between two responses of one group there: pin the
version (pinned_hash) for per-sample trainers.

The reference answer a trainer may pass (ground_truth, labels) is never shown to the judge: a
label is read only as a task id (or an object with one), as the rubric writer must not see one.
"""

from graders.engine.trainers.openrlhf import openrlhf_reward_func, openrlhf_rewards
from graders.engine.trainers.trl import TRLAsyncReward, TRLReward
from graders.engine.trainers.verl import verl_compute_score, verl_compute_score_async

__all__ = [
    "TRLAsyncReward",
    "TRLReward",
    "openrlhf_reward_func",
    "openrlhf_rewards",
    "verl_compute_score",
    "verl_compute_score_async",
]
