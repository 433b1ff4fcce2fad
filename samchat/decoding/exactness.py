"""Whether draft verification reproduces one-row decoding bit for bit on this machine.

In half precision a multi-row forward that rounds differently from a one-row one changes greedy
tokens. fastpath's exact mode removes the differences samchat found (GEMV against GEMM code,
small query blocks, key counts that change the fused attention's blocks), but which code a
BLAS or attention kernel takes is the CPU's and the library's business. So the mode is only
used after check_exact() has seen it hold here: decode some tokens one at a time, verify them
again as drafts of several sizes (some across a 512-key block boundary), compare every row.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import torch

SIZES = (2, 3, 4, 6, 8, 12, 16)
CONTEXT = 490  # decoding from here crosses the 512-key boundary of fastpath.EXACT_BLOCK
STEPS = 40


@torch.inference_mode()
def check_exact(forward: Any, model: Any, device: torch.device, seed: int = 0) -> bool:
    """True when every verification row equals one-row decoding of the same tokens, bit for
    bit, on `forward` (a ModelForward in exact mode, with its kernel plan) over random
    tokens. Sequences only: tree drafts keep their inputs' keys apart, which no padding
    makes reduce alike."""
    from samchat.decoding.kvcache import KVCache
    from samchat.decoding.tree import DraftTree

    gen = random.Random(seed)
    vocab = int(model.config.vocab_size)
    dtype = next(model.parameters()).dtype
    prompt = [gen.randrange(vocab) for _ in range(CONTEXT)]
    kv = KVCache(model)
    forward(torch.tensor([prompt], device=device), kv.cache, last_only=True)
    # Greedy one-row steps from a random start: each row's logits and the next token.
    tokens = [gen.randrange(vocab)]
    rows: list[torch.Tensor] = []
    for _ in range(STEPS):
        logits = forward(torch.tensor([[tokens[-1]]], device=device), kv.cache)
        rows.append(logits[0].clone())
        tokens.append(int(logits[0].argmax()))
    for i, start in enumerate(range(0, STEPS - max(SIZES), 2)):
        n = SIZES[i % len(SIZES)]
        draft = copy.deepcopy(kv)
        draft.crop(CONTEXT + start)
        layout = DraftTree.sequence(tokens[start + 1 : start + n], "check").layout()
        cached = draft.length
        out = forward(
            torch.tensor([tokens[start : start + n]], device=device),
            draft.cache,
            layout.attention_mask(cached, dtype, device),
            layout.position_ids(cached, device),
        )
        if any(not torch.equal(out[j], rows[start + j]) for j in range(n)):
            return False
    return True
