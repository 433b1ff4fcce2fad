"""The shape of a LLaMA-family model (llama, qwen2, qwen3), as the lean forward needs it (read
from a GGUF file's metadata or a Hugging Face config)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from samchat.errors import ModelLoadError


@dataclass
class LlamaShape:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int
    eps: float
    rope_base: float
    arch: str = "llama"  # the GGUF architecture, as llama.cpp names it
    # Rotary angles as llama.cpp computes them: position * base^(-2i/d) / rope_freqs[i] (where
    # the file has a rope_freqs tensor), times rope_scale (1 / the linear scaling factor);
    # cos and sin are then multiplied by rope_attn (the file's rope attention factor).
    rope_scale: float = 1.0
    rope_attn: float = 1.0

    # What the loader, the registry and the sessions read off a model's config.
    @property
    def max_position_embeddings(self) -> int:
        return self.context

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LlamaShape:
        return cls(**json.loads(text))

    @classmethod
    def from_hf(cls, config: Any) -> LlamaShape:
        """From a transformers config of a LLaMA model (ModelLoadError for anything else)."""
        kind = getattr(config, "model_type", "?")
        if kind != "llama":
            raise ModelLoadError(
                f"--dtype int4/int8 runs LLaMA-family models; this one is {kind} "
                "(use --dtype float32)"
            )
        rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
        scaled = isinstance(rope, dict) and rope.get("rope_type", "default") != "default"
        if scaled or getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise ModelLoadError(
                "--dtype int4/int8 runs plain LLaMA models (no rope scaling, no attention "
                "bias); use --dtype float32"
            )
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        theta = getattr(config, "rope_theta", None)
        if theta is None:
            theta = (rope if isinstance(rope, dict) else {}).get("rope_theta", 10000.0)
        return cls(
            layers=int(config.num_hidden_layers),
            hidden=hidden,
            ffn=int(config.intermediate_size),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or hidden // heads),
            vocab=int(config.vocab_size),
            context=int(getattr(config, "max_position_embeddings", 2048) or 2048),
            eps=float(config.rms_norm_eps),
            rope_base=float(theta),
        )
