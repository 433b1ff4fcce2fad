"""Calling the native forward: the model's tensors handed over once, then one call per
forward, which checks its inputs (a bad id, position, row count or shape raises IndexError or
ValueError before anything is read). A tree's rows are written in place (cache rows length +
i), and each row attends to the cache and then its own ancestors, in order."""

from __future__ import annotations

import contextlib

import torch

from samchat.engines.flat.shape import LlamaShape

_NONE = torch.empty(0, dtype=torch.long)
_LINEARS = ("qkv", "o", "gu", "down")
# How each linear's weights are held (forward.cpp's Kind): torch's kernels, or tiles (the tile
# kinds are quant.py's TILES4, TILES8, TILESF, TILES4K and TILES8K).
TORCH_INT4, TORCH_INT8 = 0, 1


def native_refusal(shape: LlamaShape) -> str | None:
    """Why the native forward cannot run a model of this shape (None: it can)."""
    if shape.head_dim % 16 or shape.head_dim > 512 or shape.heads % shape.kv_heads:
        return f"the native forward takes head sizes that are multiples of 16, not {shape.head_dim}"
    return None


class NativeModel:
    """The packed model's tensors as the native core holds them."""

    def __init__(
        self,
        fmt: str,
        shape: LlamaShape,
        t: dict[str, torch.Tensor],
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> None:
        why = native_refusal(shape)
        if why is not None:
            raise ValueError(why)
        empty = torch.empty(0)
        tensors: list[torch.Tensor] = []
        for i in range(shape.layers):
            tensors += [t[f"{i}.attn_norm"], t[f"{i}.ffn_norm"]]
            # qwen2's q/k/v bias, qwen3's q and k norms: empty where the model has none.
            tensors += [t.get(f"{i}.{name}", empty) for name in ("qkv.b", "q_norm", "k_norm")]
        kinds: list[int] = []
        for prefix in [f"{i}.{name}" for i in range(shape.layers) for name in _LINEARS] + ["out"]:
            if f"{prefix}.kind" in t:  # tiles of the file's own numbers (quant.tiles)
                kinds.append(int(t[f"{prefix}.kind"][0]))
                q = next(t[f"{prefix}.{k}"] for k in ("t4", "t8", "tf") if f"{prefix}.{k}" in t)
                tensors += [q, t.get(f"{prefix}.ts", empty), t.get(f"{prefix}.tz", empty)]
            else:
                kinds.append(TORCH_INT4 if fmt == "int4" and prefix != "out" else TORCH_INT8)
                tensors += [t[f"{prefix}.w"], t[f"{prefix}.s"], empty]
        tensors += [
            t["norm"],
            t.get("embed.q", torch.empty(0, dtype=torch.int8)),
            t.get("embed.d", empty),
            t.get("embed.f", empty),
            cos.contiguous(),
            sin.contiguous(),
        ]
        dims = [
            shape.layers,
            shape.hidden,
            shape.ffn,
            shape.heads,
            shape.kv_heads,
            shape.head_dim,
        ]
        self.kinds = kinds
        self.handle = int(torch.ops.samchat_flat.load(tensors, kinds, dims, shape.eps))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # the ops may be gone at interpreter exit
            torch.ops.samchat_flat.free(self.handle)


def ancestry(parents: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ancestors (itself last), flattened, and where each row's list starts."""
    chains: list[list[int]] = []
    for i, p in enumerate(parents):
        chains.append([*chains[p], i] if p >= 0 else [i])
    offsets = [0]
    for chain in chains:
        offsets.append(offsets[-1] + len(chain))
    flat = [a for chain in chains for a in chain]
    return torch.tensor(flat, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


def run(
    native: NativeModel,
    buf: torch.Tensor,
    length: int,
    ids: list[int],
    parents: list[int] | None,
    logits_rows: int,
) -> torch.Tensor | None:
    """Writes ids at cache rows length + i of buf (FlatCache.buf: layers, 2, kv heads, rows,
    head dim; a sequence when parents is None, else the tree they describe) and returns the
    float32 logits of the last `logits_rows` inputs."""
    anc, off = (_NONE, _NONE) if parents is None else ancestry(parents)
    out: torch.Tensor = torch.ops.samchat_flat.forward(
        native.handle, torch.tensor(ids, dtype=torch.long), anc, off, length, buf, logits_rows
    )
    return out if logits_rows > 0 else None
