"""A tiny tokenizer and causal LM built offline, for the trainers' own code in their venvs
(needs tokenizers, transformers and torch, which every trainer venv has; no hub download).

The vocabulary is a few whole words, among them the words the tests' quality judge and rubric
checks react to (tests/trainers/bundles.py), so a random model's completions get varied grades.
"""

from pathlib import Path
from typing import Any

SPECIAL = ("<pad>", "<eos>", "<unk>")
WORDS = (
    "excellent",
    "good",
    "fair",
    "poor",
    "notice",
    "unreadable",
    "the",
    "tenant",
    "landlord",
    "gives",
    "days",
    "asks",
)


def tiny_tokenizer() -> Any:
    """A word-level fast tokenizer: whitespace-split words, decoded joined by spaces."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: number for number, word in enumerate((*SPECIAL, *WORDS))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def tiny_model(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised one-layer Qwen2 causal LM over the tokenizer's vocabulary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def save_tokenizer(folder: Path) -> Path:
    """The tokenizer saved where AutoTokenizer.from_pretrained (verl's hf_tokenizer) reads it."""
    tiny_tokenizer().save_pretrained(folder)
    return folder
