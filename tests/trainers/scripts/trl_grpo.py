"""TRL's GRPOTrainer for two steps on a tiny random model, rewarded by an exported bundle.

    python trl_grpo.py BUNDLE OUT {sync,async}

`sync` hands TRL a TRLReward; `async` hands it TRLReward.as_async() after a pickle round trip
(what AsyncGRPOTrainer does to reach its spawned worker), so it is the unpickled object that TRL
must recognize as async and await. The rewards TRL computed, with the completions they were
computed for, and the metrics TRL logged go to OUT as JSON.
"""

import asyncio
import json
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import is_async_callable

from graders.engine.runtime import TRLAsyncReward, TRLReward, load_bundle
from tests.trainers.tiny import tiny_model, tiny_tokenizer

NUM_GENERATIONS = 4
PROMPTS = ("the tenant asks", "the landlord asks")  # two groups per step


class RecordingGRPOTrainer(GRPOTrainer):
    """Keeps what TRL's own reward computation produced, per reward call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded: list[dict[str, Any]] = []

    def _calculate_rewards(
        self, inputs: Any, prompts: list[Any], completions: list[Any], completion_ids: Any
    ) -> Any:
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids)
        self.recorded.append(
            {"prompts": prompts, "completions": completions, "rewards": rewards[:, 0].tolist()}
        )
        return rewards


def main(bundle: str, out: str, mode: str) -> None:
    grader = load_bundle(bundle)
    reward: TRLReward | TRLAsyncReward = TRLReward(grader, num_generations=NUM_GENERATIONS)
    if mode == "async":
        reward = pickle.loads(pickle.dumps(reward.as_async()))
        assert isinstance(reward, TRLAsyncReward)
        assert asyncio.iscoroutinefunction(reward), "asyncio does not see the unpickled mark"
        assert is_async_callable(reward), "TRL does not see an async reward function"
    tokenizer = tiny_tokenizer()
    dataset = Dataset.from_list([{"prompt": p, "task_id": "lease"} for p in PROMPTS] * 4)
    with tempfile.TemporaryDirectory() as output_dir:
        args = GRPOConfig(
            output_dir=output_dir,
            num_generations=NUM_GENERATIONS,
            per_device_train_batch_size=2 * NUM_GENERATIONS,
            max_steps=2,
            max_completion_length=6,
            learning_rate=1e-3,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            seed=0,
            dataloader_num_workers=0,
        )
        trainer = RecordingGRPOTrainer(
            model=tiny_model(tokenizer),
            reward_funcs=reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        trainer.train()
    if isinstance(reward, TRLAsyncReward):  # its own grader (unpickled), used on TRL's loop
        loop = trainer.async_loop
        asyncio.run_coroutine_threadsafe(reward.reward.grader.aclose(), loop).result()
    grader.close()
    Path(out).write_text(
        json.dumps(
            {
                "name": reward.__name__,
                "calls": trainer.recorded,
                "log_history": trainer.state.log_history,
                "python": list(sys.version_info[:2]),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
