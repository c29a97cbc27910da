"""OpenRLHF 0.11.2's SingleTurnAgentExecutor rewarding rollouts, as its rollout actor runs it.

    python openrlhf_agent.py ROLLOUTS OUT REWARD [REWARD ...]

REWARD is what --reward.remote_url holds (split on commas by OpenRLHF's CLI): reward API URLs,
or one .py file defining reward_func. ROLLOUTS is a JSON file: [{"prompt", "label",
"responses": [...]}, ...]. As RolloutRayActor does, the executor is made on the actor's running
event loop (its async __init__) and each prompt's samples are executed concurrently
(generate_responses: asyncio.gather of execute), all prompts at once. vLLM does not run on a
CPU, so a stand-in engine answers `generate` with the given responses (one per sample, EOS
token appended, after a short random delay so that prompts' samples interleave); the
tokenizer is a real transformers tokenizer (one token per character, plus the chat template's
special tokens). OUT gets, per prompt, each response with the reward, scores and extra_logs
the executor put on its sample.
"""

import asyncio
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from openrlhf.utils.agent import SingleTurnAgentExecutor
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<|im_start|>", "<|im_end|>", "<unk>"]
EOS = "<|im_end|>"


def char_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    chars = sorted({c for text in texts for c in text})
    vocab = {token: n for n, token in enumerate([*SPECIAL, *chars])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token=EOS)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL[:2]})
    return tokenizer


class StandInEngine:
    """What the executor asks of RolloutRayActor: `await generate(ids, params)` giving an
    output with token_ids, text and finish_reason."""

    def __init__(self, tokenizer: Any, rollouts: list[dict[str, Any]]) -> None:
        self.tokenizer = tokenizer
        self.left = {r["prompt"]: list(r["responses"]) for r in rollouts}
        self.rng = random.Random(0)

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, **_: Any) -> Any:
        prompt = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        response = self.left[prompt].pop(0)
        await asyncio.sleep(self.rng.uniform(0, 0.2))
        ids = self.tokenizer(text=response + EOS, add_special_tokens=False)["input_ids"]
        output = SimpleNamespace(token_ids=ids, text=response, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


async def main(rollouts: list[dict[str, Any]], reward: list[str]) -> list[list[dict[str, Any]]]:
    texts = [r["prompt"] for r in rollouts] + [t for r in rollouts for t in r["responses"]]
    tokenizer = char_tokenizer(texts)
    engine = StandInEngine(tokenizer, rollouts)
    executor = SingleTurnAgentExecutor(reward[0] if len(reward) == 1 else reward)
    params = SimpleNamespace(max_tokens=None, logprobs=None)

    async def samples(rollout: dict[str, Any]) -> list[dict[str, Any]]:
        outputs = await asyncio.gather(*[
            executor.execute(rollout["prompt"], rollout["label"], params, 4096, tokenizer, engine)
            for _ in rollout["responses"]
        ])  # fmt: skip
        prompt_ids = tokenizer(text=rollout["prompt"], add_special_tokens=False)["input_ids"]
        return [
            {
                "response": tokenizer.decode(out["observation_tokens"][len(prompt_ids) :]),
                "reward": plain(out["reward"]),
                "scores": plain(out["scores"]),
                "extra_logs": plain(out["extra_logs"]),
            }
            for out in outputs
        ]

    return list(await asyncio.gather(*[samples(rollout) for rollout in rollouts]))


if __name__ == "__main__":
    rollouts_path, out_path, *reward = sys.argv[1:]
    result = asyncio.run(main(json.loads(Path(rollouts_path).read_text()), reward))
    Path(out_path).write_text(json.dumps(result))
