"""verl's RewardLoopWorker, composed from verl's own ppo_trainer.yaml, scoring given responses
on CPU with no Ray actor (the worker is built in this process) and no rollout engine.

    python verl_reward_loop.py REQUEST OUT

REQUEST is JSON: {"overrides": [hydra overrides], "groups": [[response text, ...], ...]}; each
group becomes rollout.n samples of one prompt with one uid, extra_info {"task_id": "lease"}. The
worker scores the whole batch as verl's RewardLoopManager hands it a chunk
(compute_score_batch: one task per sample, all concurrent). OUT gets, per sample, the reward,
its reward_extra_info and the score verl's assemble_rm_scores placed in rm_scores; or, when
building the worker fails (a refusal at startup), {"startup_error": the messages}.
"""

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import verl
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.reward_loop import RewardLoopWorker

from tests.trainers.tiny import save_tokenizer, tiny_tokenizer

PROMPT = "the tenant asks"


def verl_config(overrides: list[str]) -> Any:
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def batch(groups: list[list[str]]) -> DataProto:
    tokenizer = tiny_tokenizer()
    prompt = tokenizer(PROMPT).input_ids
    responses = [
        [*tokenizer(text).input_ids, tokenizer.eos_token_id] for group in groups for text in group
    ]
    width = max(len(ids) for ids in responses)
    padded = [ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids in responses]
    size = len(responses)
    mask = [[1] * len(prompt) + [1] * len(ids) + [0] * (width - len(ids)) for ids in responses]
    tensors = TensorDict(
        {
            "prompts": torch.tensor([prompt] * size),
            "responses": torch.tensor(padded),
            "input_ids": torch.tensor([prompt + ids for ids in padded]),
            "attention_mask": torch.tensor(mask),
        },
        batch_size=size,
    )

    def column(values: list[Any]) -> Any:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array

    uids = [f"prompt-{number}" for number, group in enumerate(groups) for _ in group]
    return DataProto(
        batch=tensors,
        non_tensor_batch={
            "data_source": column(["workbench"] * size),
            "reward_model": column([{"style": "model", "ground_truth": ""} for _ in uids]),
            "extra_info": column([{"task_id": "lease"} for _ in uids]),
            "uid": column(uids),
        },
    )


def main(request_path: str, out: str) -> None:
    request = json.loads(Path(request_path).read_text())
    with tempfile.TemporaryDirectory() as folder:
        tokenizer_dir = save_tokenizer(Path(folder))
        config = verl_config(
            [f"actor_rollout_ref.model.path={tokenizer_dir}", *request["overrides"]]
        )
        try:
            worker = RewardLoopWorker(config)
        except Exception as error:  # what verl shows when it starts the reward worker
            messages = []
            cause: BaseException | None = error
            while cause is not None:
                messages.append(f"{type(cause).__name__}: {cause}")
                cause = cause.__cause__
            Path(out).write_text(json.dumps({"startup_error": messages}))
            return
        data = batch(request["groups"])
        outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
        scores = [output["reward_score"] for output in outputs]
        rm_scores = type(worker.reward_manager).assemble_rm_scores(data, scores)
    Path(out).write_text(
        json.dumps(
            {
                "manager": type(worker.reward_manager).__name__,
                "scores": scores,
                "extra": [output["reward_extra_info"] for output in outputs],
                "rm_scores": rm_scores.sum(dim=-1).tolist(),
            },
            default=str,
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
