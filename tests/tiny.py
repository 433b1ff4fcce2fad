"""A tiny random Llama, for the tests of decoding and of the torch engine where speed demands
it: the model, what ChatSession reads of it, its reference logits, and the fixtures that run it
(each test folder's conftest.py re-exports the fixtures it uses)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.fakes import ModelRecord

__all__ = ["TINY_VOCAB", "full_logits", "make_tiny_llama", "one_thread", "tiny_lm", "tiny_model"]

TINY_VOCAB = 64


def make_tiny_llama(attn: str = "sdpa", seed: int = 0, kv_heads: int = 2) -> Any:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        attn_implementation=attn,
    )
    model = LlamaForCausalLM(config)
    # Larger logits than the default init, so that sampling tests see peaked distributions.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model.eval()


def tiny_lm(model: Any) -> ModelRecord:
    """What ChatSession reads from a LoadedModel, for the verification-level tests."""
    return ModelRecord(model, vocab_size=int(model.config.vocab_size), device=torch.device("cpu"))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """The tiny model's ops are so small that a second thread only spins (badly so on a
    shared machine): run them on one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model() -> Any:
    return make_tiny_llama()


@torch.inference_mode()
def full_logits(model: Any, tokens: list[int]) -> torch.Tensor:
    """Logits of a fresh forward over tokens, no cache: the reference."""
    out = model(input_ids=torch.tensor([tokens]), use_cache=False)
    logits: torch.Tensor = out.logits[0]
    return logits
