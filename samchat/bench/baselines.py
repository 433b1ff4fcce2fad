"""The engines' own speculative decoding that samchat's methods are measured against (`pld`):
transformers' prompt lookup decoding on torch, and llama-cpp-python's `Llama` with its prompt
lookup draft model on llama.cpp, each greedy from the prompt samchat renders. Each returns a
reply's token ids, its seconds and its forwards (steps)."""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from samchat.decoding.prompt import render_prompt
from samchat.errors import SamchatError
from samchat.messages import Message

if TYPE_CHECKING:
    from samchat.decoding.protocols import SessionModel
    from samchat.engines.base import EngineModel
    from samchat.models.loader import LoadedModel

# transformers' prompt lookup decoding
TORCH_PLD_TOKENS = 10
TORCH_PLD_NGRAM = 3
# llama-cpp-python's prompt lookup decoding (the llama.cpp peer of transformers' PLD)
LLAMA_PLD_TOKENS = 10
LLAMA_PLD_NGRAM = 2  # LlamaPromptLookupDecoding's default


class PldLlama(Protocol):
    """What llama_pld makes: llama-cpp-python's Llama, its eval() calls counted."""

    evals: int

    def n_ctx(self) -> int: ...

    def generate(
        self,
        tokens: Sequence[int],
        *,
        top_k: int,
        top_p: float,
        min_p: float,
        temp: float,
        repeat_penalty: float,
    ) -> Generator[int, None, None]: ...

    def close(self) -> None: ...


def torch_pld(
    lm: LoadedModel, messages: list[Message], max_new_tokens: int
) -> tuple[list[int], float, int]:
    """transformers' own prompt lookup decoding on the same model."""
    import torch

    from samchat.engines.torch.engine import hf_model

    model = hf_model(lm.model)
    tok: Any = lm.tokenizer  # transformers' own: tensors out, beyond the Tokenizer protocol
    enc = tok.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    input_ids = enc["input_ids"].to(torch.device(str(lm.device)))
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    hook = model.register_forward_hook(count)
    try:
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                prompt_lookup_num_tokens=TORCH_PLD_TOKENS,
                max_matching_ngram_size=TORCH_PLD_NGRAM,
                eos_token_id=list(lm.eos_ids),
                pad_token_id=lm.eos_ids[0],
            )
        seconds = time.perf_counter() - start
    finally:
        hook.remove()
    # PLD drafts from the prompt from the first forward on: every call is a step.
    return out[0, input_ids.shape[1] :].tolist(), seconds, max(calls[0], 1)


def llama_pld_settings() -> dict[str, str | int | bool]:
    """How `llamacpp:pld` runs (for the benchmark's metadata)."""
    return {
        "implementation": "llama_cpp.Llama + llama_speculative.LlamaPromptLookupDecoding",
        "num_pred_tokens": LLAMA_PLD_TOKENS,
        "max_ngram_size": LLAMA_PLD_NGRAM,
        "kv_cache": "q8_0 keys and values, flash attention (samchat's llama.cpp short chats)",
        "logits_all": True,
        "sampling": "greedy (temp 0, top_k 1)",
    }


def llama_pld(lm: EngineModel) -> PldLlama:
    """A llama-cpp-python Llama over lm's GGUF file with its prompt lookup draft model, the KV
    cache kept as samchat's llama.cpp engine keeps a short chat's (Q8_0, flash attention),
    its eval() calls counted. logits_all=True: with a draft model Llama keeps every row's
    logits, but sizes its logits buffer by n_batch unless logits_all is given, and then fails
    once a conversation passes n_batch tokens."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from samchat.engines.llamacpp.engine import Q8_0
    from samchat.engines.llamacpp.model import llama, loaded_weights, threads

    llama()  # initialised once, llama.cpp's log routed to Python logging

    class CountingLlama(llama_cpp.Llama):  # type: ignore[misc,unused-ignore]  # Any without it
        evals = 0

        def eval(self, tokens: Sequence[int]) -> None:
            self.evals += 1
            super().eval(tokens)

    n = threads()
    return CountingLlama(
        model_path=str(loaded_weights(lm.model).path),
        draft_model=LlamaPromptLookupDecoding(
            max_ngram_size=LLAMA_PLD_NGRAM, num_pred_tokens=LLAMA_PLD_TOKENS
        ),
        logits_all=True,
        n_ctx=int(lm.context_limit),
        n_gpu_layers=0,
        n_threads=n,
        n_threads_batch=n,
        flash_attn=True,
        type_k=Q8_0,
        type_v=Q8_0,
        verbose=False,
    )


def llama_pld_reply(
    llm: PldLlama, lm: SessionModel, messages: list[Message], max_new_tokens: int
) -> tuple[list[int], float, int]:
    """llama-cpp-python's prompt lookup decoding on `llm` (made by llama_pld(lm)), greedy.
    Each eval() is one forward (the prompt, then the pending token plus the draft) that
    yields at least one token: every call is a step, as in samchat's count."""
    prompt = render_prompt(lm.tokenizer, messages)
    room = int(llm.n_ctx()) - len(prompt)
    if room <= 0:
        raise SamchatError(
            f"a prompt of {len(prompt)} tokens does not fit llama.cpp's context "
            f"({llm.n_ctx()} tokens); lower --max-new-tokens or pick other questions"
        )
    limit = min(max_new_tokens, room)
    eos = set(lm.eos_ids)
    ids: list[int] = []
    llm.evals = 0
    start = time.perf_counter()
    tokens = llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
    try:
        for token in tokens:
            ids.append(int(token))
            if token in eos or len(ids) >= limit:
                break
    finally:
        tokens.close()
    seconds = time.perf_counter() - start
    return ids, seconds, max(int(llm.evals), 1)
