"""Model hyper-parameters, read from (and written to) a Hugging Face Qwen3-MoE config.json.

Field names follow HF `Qwen3MoeConfig` (transformers 5.x) so a config.json round-trips;
`shared_expert_intermediate_size` comes from Qwen2-MoE / Qwen3.5-MoE, where a dense
expert with a sigmoid gate runs beside the routed ones (0 = no shared expert).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# HF defaults (transformers `Qwen3MoeConfig`) for fields a config.json may omit.
_HF_DEFAULT_ROPE_THETA = 10000.0
_HF_DEFAULT_RMS_EPS = 1e-6


class ConfigError(ValueError):
    """A config.json field is missing, malformed or names a feature this model lacks."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"config field {field_name!r}: {message}")
        self.field = field_name


@dataclass(kw_only=True, slots=True, frozen=True)
class Config:
    """Architecture of a decoder-only MoE transformer (Qwen3-MoE layout)."""

    vocab_size: int
    """Rows of the embedding and of the LM head (V)."""
    hidden_size: int
    """Model width (D)."""
    num_hidden_layers: int
    """Decoder layers."""
    num_attention_heads: int
    """Query heads (H)."""
    num_key_value_heads: int
    """Key/value heads (G); H must be a multiple of G (grouped-query attention)."""
    head_dim: int
    """Width of one head; Qwen3 sets it explicitly (128), so H*head_dim may differ from D."""
    intermediate_size: int
    """FFN width of dense (non-MoE) layers."""
    moe_intermediate_size: int
    """FFN width of one routed expert (F)."""
    num_experts: int
    """Routed experts per MoE layer (E); 0 makes every layer dense."""
    num_experts_per_tok: int
    """Experts each token is routed to (K)."""
    norm_topk_prob: bool = True
    """Renormalise the k gate weights to sum to 1 (Qwen3-MoE ships True)."""
    shared_expert_intermediate_size: int = 0
    """FFN width of the always-on shared expert (Qwen2-MoE / Qwen3.5 style); 0 = none."""
    decoder_sparse_step: int = 1
    """Layer i is MoE when (i + 1) % decoder_sparse_step == 0 (HF rule)."""
    mlp_only_layers: tuple[int, ...] = ()
    """Layer indices forced dense whatever decoder_sparse_step says."""
    rope_theta: float = _HF_DEFAULT_ROPE_THETA
    """RoPE base frequency."""
    rms_norm_eps: float = _HF_DEFAULT_RMS_EPS
    """Epsilon inside every RMSNorm."""
    max_position_embeddings: int = 32768
    """Context length the model was trained for; the engine refuses longer sequences."""
    attention_bias: bool = False
    """Bias on q/k/v/o projections (False for Qwen3)."""
    tie_word_embeddings: bool = False
    """LM head shares the embedding matrix."""
    eos_token_id: tuple[int, ...] = ()
    """End-of-sequence ids from config.json (informational; requests name their stops)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unrecognised config.json fields, kept so a written config round-trips."""

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError("num_key_value_heads", "must divide num_attention_heads")
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ConfigError("num_experts_per_tok", "must be in 1..num_experts")
        # Routing is exported as int16 (vLLM's routed_experts dtype).
        if self.num_experts > 32767:
            raise ConfigError("num_experts", "routing is int16; at most 32767 experts")
        if self.head_dim % 2:
            raise ConfigError("head_dim", "RoPE needs an even head_dim")

    def is_moe_layer(self, layer: int) -> bool:
        """HF Qwen3MoeDecoderLayer's rule for choosing a sparse MLP."""
        return (
            self.num_experts > 0
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Indices of MoE layers; routing tensors' L axis follows this order."""
        return tuple(i for i in range(self.num_hidden_layers) if self.is_moe_layer(i))

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> Config:
        """Build from a parsed HF config.json (Qwen3-MoE; Qwen2-MoE-style shared expert)."""
        if hf.get("hidden_act", "silu") != "silu":
            raise ConfigError("hidden_act", f"only silu (SwiGLU) is supported, got {hf['hidden_act']!r}")
        if hf.get("use_sliding_window", False):
            raise ConfigError("use_sliding_window", "sliding-window attention is not supported")
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ConfigError("rope_parameters", f"only default RoPE is supported, got {rope_type!r}")
        # transformers 5 moved rope_theta into rope_parameters; hub configs keep it top-level.
        theta = rope.get("rope_theta", hf.get("rope_theta", _HF_DEFAULT_ROPE_THETA))
        try:
            heads = int(hf["num_attention_heads"])
            eos = hf.get("eos_token_id")
            known = {f.name for f in dataclasses.fields(cls)} | {
                "rope_parameters", "rope_scaling", "hidden_act", "use_sliding_window", "num_local_experts",
                # to_hf writes these itself
                "architectures", "model_type", "dtype", "torch_dtype", "transformers_version",
            }
            return cls(
                vocab_size=int(hf["vocab_size"]),
                hidden_size=int(hf["hidden_size"]),
                num_hidden_layers=int(hf["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(hf.get("num_key_value_heads", heads)),
                head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
                intermediate_size=int(hf.get("intermediate_size", 0)),
                moe_intermediate_size=int(hf.get("moe_intermediate_size", 0)),
                num_experts=int(hf.get("num_experts", hf.get("num_local_experts", 0))),
                num_experts_per_tok=int(hf.get("num_experts_per_tok", 0)),
                norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
                shared_expert_intermediate_size=int(hf.get("shared_expert_intermediate_size") or 0),
                decoder_sparse_step=int(hf.get("decoder_sparse_step", 1)),
                mlp_only_layers=tuple(int(i) for i in hf.get("mlp_only_layers") or ()),
                rope_theta=float(theta),
                rms_norm_eps=float(hf.get("rms_norm_eps", _HF_DEFAULT_RMS_EPS)),
                max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
                attention_bias=bool(hf.get("attention_bias", False)),
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                eos_token_id=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
                extra={k: v for k, v in hf.items() if k not in known},
            )
        except KeyError as missing:
            raise ConfigError(str(missing.args[0]), "required field is missing") from None

    def to_hf(self) -> dict[str, Any]:
        """The config.json dict (the opposite of `from_hf`); loads as transformers' Qwen3MoeConfig."""
        out: dict[str, Any] = {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            **self.extra,
        }
        for f in dataclasses.fields(self):
            if f.name in ("extra", "rope_theta", "eos_token_id"):
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["hidden_act"] = "silu"
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.eos_token_id:
            out["eos_token_id"] = list(self.eos_token_id) if len(self.eos_token_id) > 1 else self.eos_token_id[0]
        if not self.shared_expert_intermediate_size:
            del out["shared_expert_intermediate_size"]
        return out
