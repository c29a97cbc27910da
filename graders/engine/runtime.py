"""The export runtime, in one import for training jobs and the workbench's reward API:

    from graders.engine.runtime import load_bundle, TRLReward, CaptureTarget

Bundles and the Grader live in bundle.py (the format is documented there); a grader that
follows a workbench alias (follow_alias) in follow.py; the TRL, verl and OpenRLHF reward
functions in trainers/ (verl's group reward manager, loaded by verl itself, in
trainers/verl_manager.py), which take either; the capture target, which sends a sample of the
graded groups back to the workbench, in capture_client.py; docs/trainers.md shows how to wire
each one.
"""

from graders.engine.bundle import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    BundleInfo,
    BundleInvalid,
    Grader,
    GradeResult,
    documents_input,
    load_bundle,
    prompt_text,
    response_input,
)
from graders.engine.capture_client import CaptureTarget
from graders.engine.follow import FollowedGrader, FollowFailed, FollowRefused, follow_alias
from graders.engine.trainers import (
    TRLAsyncReward,
    TRLReward,
    openrlhf_reward_func,
    verl_compute_score,
    verl_compute_score_async,
)

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "BundleInfo",
    "BundleInvalid",
    "CaptureTarget",
    "FollowFailed",
    "FollowRefused",
    "FollowedGrader",
    "GradeResult",
    "Grader",
    "TRLAsyncReward",
    "TRLReward",
    "documents_input",
    "follow_alias",
    "load_bundle",
    "openrlhf_reward_func",
    "prompt_text",
    "response_input",
    "verl_compute_score",
    "verl_compute_score_async",
]
