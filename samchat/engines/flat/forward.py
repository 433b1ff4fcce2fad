"""The flat engine's model, its cache and its Python forward of llama, qwen2 and qwen3 models
on weight-only int4/int8 linears (CPU), whose every row is computed the same way whatever the
number of rows, so that verifying k drafted tokens gives the logits k one-token steps would,
bit for bit.

Linears and the element-wise parts (biases, rms_norm, rotary, SiLU) are row-exact as they are;
attention is not when its rows share one call (a k-row bfloat16 SDPA rounds differently from a
one-row one). So each row is its own attention problem, defined by its own position p alone:
the keys of its sequence (the cache, then its own ancestors) split at B = p rounded down to 64
into a prefix [0, B) and a tail [B, p] padded to 64 keys. Both halves are batched over rows
(one row per batch entry, which the CPU kernel computes alone) and merged by their
log-sum-exp. A step and a verification row at the same position pose the very same two
problems.

This is the fallback where the native forward (native/) cannot be built. Its linears are
torch's int4/int8 kernels on bfloat16 activations and its attention torch's, so its logits
are near the native forward's but not equal to them: each forward's rows are exact on their
own, and the engine choice is kept per forward (models/engine_choice.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from samchat.engines.flat.quant import Embedding, Linear
from samchat.engines.flat.shape import LlamaShape

if TYPE_CHECKING:
    from samchat.engines.flat.native.forward import NativeModel

_LINEARS = ("qkv", "o", "gu", "down")
TAIL = 64  # keys of a row's tail problem; also the most rows a tree may have
_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _flash(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and log-sum-exp of each row (one batch entry is one problem)."""
    out, lse = _FLASH(q, k, v, attn_mask=attn_mask)
    return out, lse


@dataclass
class Layer:
    attn_norm: torch.Tensor
    ffn_norm: torch.Tensor
    qkv: Linear
    o: Linear
    gate_up: Linear
    down: Linear
    qkv_bias: torch.Tensor | None = None  # qwen2's
    q_norm: torch.Tensor | None = None  # qwen3's, per head before the rotary
    k_norm: torch.Tensor | None = None


def rotary_tables(
    shape: LlamaShape, factors: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's rotary angles, (context + TAIL, head dim) float32 in
    halves, sin's first half negated (rotate_half's sign). The angles are llama.cpp's, in its
    float32 steps: theta = p, multiplied by base^(-2/d) once per frequency, divided by the
    file's rope_freqs factor (Llama 3), times the linear scale; cos and sin times rope_attn."""
    half = shape.head_dim // 2
    step = np.power(np.float32(shape.rope_base), np.float32(-2.0 / shape.head_dim))
    start = np.full((shape.context + TAIL, half), step, dtype=np.float32)
    start[:, 0] = np.arange(shape.context + TAIL, dtype=np.float32)
    theta: npt.NDArray[np.float32]
    theta = np.multiply.accumulate(start, axis=1, dtype=np.float32)
    if factors is not None:
        theta = np.divide(theta, factors.numpy().astype(np.float32), dtype=np.float32)
    theta = np.multiply(theta, np.float32(shape.rope_scale), dtype=np.float32)
    cos = np.cos(theta) * np.float32(shape.rope_attn)
    sin = np.sin(theta) * np.float32(shape.rope_attn)
    both = torch.from_numpy(np.concatenate([cos, cos], axis=1))
    signed = torch.from_numpy(np.concatenate([-sin, sin], axis=1))
    return both.contiguous(), signed.contiguous()


class FlatModel:
    """The packed weights of a llama, qwen2 or qwen3 model, shared by every engine made from
    it."""

    def __init__(
        self,
        fmt: str,
        shape: LlamaShape,
        t: dict[str, torch.Tensor],
        about: str,
        forward: str = "python",
    ) -> None:
        self.fmt = fmt
        self.shape = shape
        self.config = shape  # what the registry and loader read (context, vocabulary)
        self.about = about  # where the packed weights came from, for describe()
        self.tensors = t
        # The forward the tensors are laid out for ("native": tiles; "python": torch's
        # kernels' layout); only that forward runs them.
        self.forward = forward
        python = forward == "python"
        self.layers = [self._layer(i) for i in range(shape.layers)] if python else []
        self.embed = Embedding.from_tensors(t)
        self.norm = t["norm"]
        # 8-bit: 4 bits cost 5% perplexity.
        self.out = Linear("int8", t["out.w"], t["out.s"]) if python else None
        self.cos, self.sin = rotary_tables(shape, t.get("rope_freqs"))
        self.native: NativeModel | None = None  # the compiled forward, once go_native ran

    def _layer(self, i: int) -> Layer:
        t = self.tensors
        lin = {n: Linear(self.fmt, t[f"{i}.{n}.w"], t[f"{i}.{n}.s"]) for n in _LINEARS}
        return Layer(
            t[f"{i}.attn_norm"],
            t[f"{i}.ffn_norm"],
            lin["qkv"],
            lin["o"],
            lin["gu"],
            lin["down"],
            qkv_bias=t.get(f"{i}.qkv.b"),
            q_norm=t.get(f"{i}.q_norm"),
            k_norm=t.get(f"{i}.k_norm"),
        )

    def go_native(self, cache_dir: Path | None, say: Callable[[str], None]) -> str | None:
        """Hands the tensors to the compiled forward (built first where needed); None when
        it runs from now on, else why it cannot."""
        from samchat.engines.flat.native import build
        from samchat.engines.flat.native.forward import NativeModel

        if self.forward != "native":
            return "the weights are packed for the Python forward"
        why = build.load(cache_dir, say)
        if why is not None:
            return why
        try:
            self.native = NativeModel(self.fmt, self.shape, self.tensors, self.cos, self.sin)
        except ValueError as exc:
            return str(exc)
        return None

    @property
    def parameters_count(self) -> int:
        s = self.shape
        per_layer = s.hidden * (s.heads + 2 * s.kv_heads) * s.head_dim
        per_layer += s.heads * s.head_dim * s.hidden + 3 * s.hidden * s.ffn
        return s.layers * per_layer + s.vocab * s.hidden


class FlatCache:
    """Keys and values of every layer, bfloat16, held as `buf` (layers, 2, kv heads, capacity +
    TAIL + 1, head dim): each key head's rows end to end, as the native forward streams them.
    Rows by position, then TAIL scratch rows where a tree's inputs wait for commit, then one
    zero row that pads every tail. `rows` views them by row (layers, 2, rows, kv heads, head
    dim)."""

    def __init__(self, shape: LlamaShape, rows: int = 512) -> None:
        self.shape = shape
        self.length = 0
        self.capacity = 0
        self.buf = torch.zeros(0)
        self.reserve(rows)

    @property
    def rows(self) -> torch.Tensor:
        return self.buf.transpose(2, 3)

    @property
    def scratch(self) -> int:
        return self.capacity

    @property
    def zero(self) -> int:
        return self.capacity + TAIL

    def reserve(self, rows: int) -> None:
        """Room for `rows` positions (grown by doubling, never past the context)."""
        if rows <= self.capacity:
            return
        s = self.shape
        cap = max(rows, 2 * self.capacity, 512)
        cap = min(cap, s.context + TAIL)
        if cap < rows:
            raise ValueError(f"{rows} positions do not fit the model's context of {s.context}")
        buf = torch.zeros(
            (s.layers, 2, s.kv_heads, cap + TAIL + 1, s.head_dim), dtype=torch.bfloat16
        )
        if self.length:
            buf[:, :, :, : self.length] = self.buf[:, :, :, : self.length]
        self.buf, self.capacity = buf, cap


@dataclass
class _Prefix:
    """Rows whose prefix is [0, B): `rows` (None: all of them), and for a tree row past the
    cache, the scratch rows (its ancestors) to lay at [cache length, B) first."""

    start: int
    rows: torch.Tensor | None
    fill: torch.Tensor | None


class _Plan:
    """What every layer of one forward reads: positions, tail gathers and masks, prefixes."""

    def __init__(
        self, cache: FlatCache, n: int, parents: list[int] | None, device: torch.device
    ) -> None:
        length = cache.length
        if parents is None:  # a sequence: row i at length + i, written in place
            ancestry = [list(range(i + 1)) for i in range(n)]
        else:
            ancestry = []
            for i, p in enumerate(parents):
                ancestry.append([*ancestry[p], i] if p >= 0 else [i])
        self.in_place = parents is None
        pos = [length + len(a) - 1 for a in ancestry]
        self.pos = torch.tensor(pos, dtype=torch.long, device=device)
        index: list[int] = []
        mask = torch.zeros((n, 1, 1, TAIL), dtype=torch.bfloat16, device=device)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (p, anc) in enumerate(zip(pos, ancestry, strict=True)):
            b = p - p % TAIL
            seq = [self._where(cache, x, anc, length) for x in range(b, p + 1)]
            mask[i, 0, 0, len(seq) :] = float("-inf")
            index.extend(seq + [cache.zero] * (TAIL - len(seq)))
            if b > 0:
                # Rows past the cache share a prefix only with the same ancestors up to B.
                key = anc[b - length - 1] if not self.in_place and b > length else -1
                groups.setdefault((b, key), []).append(i)
        self.index = torch.tensor(index, dtype=torch.long, device=device)
        self.mask = mask
        self.prefixes: list[_Prefix] = []
        for (b, key), rows in sorted(groups.items()):
            fill = None
            if key >= 0:
                chain = ancestry[key]
                fill = torch.tensor([cache.scratch + a for a in chain], device=device)
            sel = None if len(rows) == n else torch.tensor(rows, device=device)
            self.prefixes.append(_Prefix(b, sel, fill))

    def _where(self, cache: FlatCache, x: int, anc: list[int], length: int) -> int:
        """The cache row holding position x of a row's sequence."""
        if x < length or self.in_place:
            return x
        return cache.scratch + anc[x - length]


def _attention(cache: FlatCache, layer: int, q: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """q (n, kv heads, group, head dim) bfloat16 -> (n, heads * head dim) bfloat16."""
    buf = cache.rows[layer]
    n, kv, _, hd = q.shape
    tail = buf.index_select(1, plan.index).view(2, n, TAIL, kv, hd).transpose(2, 3)
    o_tail, lse_tail = _flash(q, tail[0], tail[1], attn_mask=plan.mask)
    if not plan.prefixes:
        return o_tail.view(n, -1)
    out = o_tail.float()
    for pre in plan.prefixes:
        if pre.fill is not None:
            buf[:, cache.length : pre.start] = buf[:, pre.fill]
        rows = n if pre.rows is None else int(pre.rows.numel())
        pk, pv = buf[:, : pre.start].transpose(1, 2).unsqueeze(1).expand(2, rows, kv, pre.start, hd)
        qs = q if pre.rows is None else q.index_select(0, pre.rows)
        o_pre, lse_pre = _flash(qs, pk, pv)
        t_out = out if pre.rows is None else out.index_select(0, pre.rows)
        t_lse = lse_tail if pre.rows is None else lse_tail.index_select(0, pre.rows)
        # The weights spread over whole rows, so that every element-wise kernel runs the
        # same vectorized loop for a row whatever the number of rows.
        w = torch.sigmoid((lse_pre - t_lse).unsqueeze(-1).expand(-1, -1, -1, hd).contiguous())
        merged = torch.lerp(t_out, o_pre.float(), w)
        if pre.rows is None:
            out = merged
        else:
            out.index_copy_(0, pre.rows, merged)
    return out.view(n, -1).to(torch.bfloat16)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in halves; `sin`'s first half is negated (rotate_half's sign)."""
    half = x.shape[-1] // 2
    swapped = torch.cat([x[..., half:], x[..., :half]], dim=-1)
    return x.mul(cos).add_(swapped.mul_(sin)).to(torch.bfloat16)


def run(
    model: FlatModel,
    cache: FlatCache,
    ids: list[int],
    parents: list[int] | None,
    logits_rows: int,
) -> torch.Tensor | None:
    """Append ids at cache.length + depth (a sequence when parents is None, else the tree
    they describe; a tree waits in the scratch rows) and return the logits (float32) of the
    last `logits_rows` inputs. The cache's length is not advanced: see FlatEngine.commit."""
    s = model.shape
    n = len(ids)
    device = torch.device("cpu")
    if model.out is None:
        raise ValueError("these weights are packed for the native forward, not the Python one")
    if parents is not None and n > TAIL:
        raise ValueError(f"a tree of {n} inputs is more than the {TAIL} verification takes")
    if n <= 0 or not 0 <= logits_rows <= n:
        raise ValueError(f"logits of {logits_rows} rows asked of a forward of {n}")
    bad = [t for t in ids if not 0 <= t < s.vocab]
    if bad:
        raise IndexError(f"token id {bad[0]} is outside the vocabulary of {s.vocab}")
    length = cache.length
    cache.reserve(length + max(n, TAIL))
    plan = _Plan(cache, n, parents, device)
    x = model.embed(torch.tensor(ids, dtype=torch.long, device=device))
    cos = model.cos.index_select(0, plan.pos).unsqueeze(1)
    sin = model.sin.index_select(0, plan.pos).unsqueeze(1)
    hq, hk, hd = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.head_dim
    group = s.heads // s.kv_heads
    at = slice(length, length + n) if plan.in_place else slice(cache.scratch, cache.scratch + n)
    heads = s.heads + s.kv_heads
    for i, layer in enumerate(model.layers):
        h = F.rms_norm(x, (s.hidden,), layer.attn_norm, s.eps).to(torch.bfloat16)
        qkv = layer.qkv(h).float()
        if layer.qkv_bias is not None:
            qkv.add_(layer.qkv_bias)
        qk = qkv[:, : hq + hk].view(n, heads, hd)
        if layer.q_norm is not None and layer.k_norm is not None:
            q = F.rms_norm(qk[:, : s.heads], (hd,), layer.q_norm, s.eps)
            k = F.rms_norm(qk[:, s.heads :], (hd,), layer.k_norm, s.eps)
            qk = torch.cat([q, k], dim=1)
        qk = _rotate(qk, cos, sin)
        kv = cache.rows[i, :, at]
        kv[0] = qk[:, s.heads :]
        kv[1] = qkv[:, hq + hk :].view(n, s.kv_heads, hd)
        attn = _attention(cache, i, qk[:, : s.heads].view(n, s.kv_heads, group, hd), plan)
        x.add_(layer.o(attn))
        h = F.rms_norm(x, (s.hidden,), layer.ffn_norm, s.eps).to(torch.bfloat16)
        gu = layer.gate_up(h)
        x.add_(layer.down(F.silu(gu[:, : s.ffn]) * gu[:, s.ffn :]))
    if logits_rows <= 0:
        return None
    last = x[n - logits_rows :]
    h = F.rms_norm(last, (s.hidden,), model.norm, s.eps).to(torch.bfloat16)
    return model.out(h).float()
