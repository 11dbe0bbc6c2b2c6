"""The embedded engine vs transformers' generate() on the same weights: decode throughput, or an agent workload.

    python -m lego_rl.engine.bench [--workload decode] [--model-dir DIR] [--new-tokens 64] [--prompt-len 32]
    python -m lego_rl.engine.bench --workload agent [--sessions 16] [--turns 12]

`--workload agent` (agent_bench.py) replays multi-turn agent sessions through both and
reports the wall time of the whole workload, the prefix hit rate and the prefill tokens
saved; its last line is
{"bench":"engine","workload":"agent","vs_hf_agent":…,"prefix_hit_rate":…,…}.

The default `decode` workload:

Without --model-dir it writes the tiny models (`lego_rl.model.tiny`) to a temporary
directory: the Qwen3-tokenizer one (the headline figures) and, with `--tokenizer both`
(the default), the byte-tokenizer one too (`bytes_*` keys), whose 259-token LM head
shows the engine's own cost rather than the 78 MB Qwen3 LM head both sides must read. Every request is greedy, has the same prompt length and no stop
token, so both sides generate exactly `--new-tokens` per request with no padding.
tokens/s = completion tokens / wall time of the whole generation (prefill included; the
prompts are short), best of --repeats runs, engine and transformers interleaved so both see
the same background load. Both use the same torch thread count (--threads). The last line
is JSON:
{"bench":"engine","workload":"decode","tokens_per_s_c1":…,"tokens_per_s_c8":…,"tokens_per_s_c32":…,
 "hf_tokens_per_s_c8":…,"vs_hf_c8":…,"bytes_tokens_per_s_c8":…,…,"bytes_vs_hf_c8":…}
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from lego_rl.model import QWEN3_TOKENS, write_tiny_model

from .agent_bench import AgentWorkload
from .agent_bench import run as run_agent
from .engine import Engine, EngineConfig
from .types import GenerationRequest, SamplingParams


def _prompts(n: int, length: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, min(vocab, 50_000), (n, length), generator=gen).tolist()


def engine_tokens_per_s(engine: Engine, concurrency: int, prompt_len: int, new_tokens: int) -> float:
    prompts = _prompts(concurrency, prompt_len, engine.model.config.vocab_size)
    requests = [
        GenerationRequest(request_id=f"c{concurrency}-{i}", prompt_token_ids=tuple(p), sampling=SamplingParams(temperature=0, max_tokens=new_tokens))
        for i, p in enumerate(prompts)
    ]
    start = time.perf_counter()
    results = engine.generate(requests)
    elapsed = time.perf_counter() - start
    produced = sum(len(r.completion_token_ids) for r in results.values())
    assert produced == concurrency * new_tokens
    return produced / elapsed


class HfGenerate:
    """transformers' Qwen3MoeForCausalLM.generate() on the same weights, greedy, no padding."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM  # dev dependency; only the benchmark needs it

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    @torch.inference_mode()
    def tokens_per_s(self, concurrency: int, prompt_len: int, new_tokens: int) -> float:
        ids = torch.tensor(_prompts(concurrency, prompt_len, self.model.config.vocab_size))
        start = time.perf_counter()
        out = self.model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0
        )
        elapsed = time.perf_counter() - start
        produced = (out.shape[1] - prompt_len) * concurrency
        assert produced == concurrency * new_tokens
        return produced / elapsed


def measure(model_dir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Best-of-`repeats` decode tokens/s of the engine (c1, c8, c32) and HF generate (c8) on one model."""
    engine = Engine.from_model_dir(model_dir)
    hf = HfGenerate(model_dir)
    engine_tokens_per_s(engine, 2, args.prompt_len, 4)  # warm-up
    hf.tokens_per_s(2, args.prompt_len, 4)
    best = {key: 0.0 for key in ("tokens_per_s_c1", "tokens_per_s_c8", "tokens_per_s_c32", "hf_tokens_per_s_c8")}
    for _ in range(args.repeats):
        # Interleaved, so load from other processes hits both sides alike.
        for c in (1, 8, 32):
            best[f"tokens_per_s_c{c}"] = max(best[f"tokens_per_s_c{c}"], engine_tokens_per_s(engine, c, args.prompt_len, args.new_tokens))
        best["hf_tokens_per_s_c8"] = max(best["hf_tokens_per_s_c8"], hf.tokens_per_s(8, args.prompt_len, args.new_tokens))
        print(f"so far ({model_dir.name}):", {k: round(v, 1) for k, v in best.items()}, flush=True)
    report = {k: round(v, 1) for k, v in best.items()}
    report["vs_hf_c8"] = round(best["tokens_per_s_c8"] / best["hf_tokens_per_s_c8"], 2)
    return report


def main(argv: list[str] | None = None) -> dict[str, float | str]:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.engine.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=("decode", "agent"), default="decode")
    parser.add_argument("--model-dir", type=Path, help="HF-layout model dir; default: fresh tiny models")
    parser.add_argument("--tokenizer", choices=("qwen3", "bytes", "both"), default="both", help="tokenizer of the default model(s)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=32)
    # One intra-op thread by default: on a shared 2-core machine every small op's parallel
    # region stalls whenever the other core is busy, which swamps the measurement.
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both sides")
    parser.add_argument("--repeats", type=int, default=3, help="decode: report the best of this many runs (shared machines are noisy)")
    parser.add_argument("--sessions", type=int, default=AgentWorkload().sessions, help="agent: concurrent sessions")
    parser.add_argument("--turns", type=int, default=AgentWorkload().turns, help="agent: turns per session")
    parser.add_argument("--prefill-chunk", type=int, default=EngineConfig().prefill_chunk, help="agent: the engine's prefill chunk")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    report: dict[str, float | str] = {"bench": "engine", "workload": args.workload}
    with tempfile.TemporaryDirectory() as tmp:
        if args.workload == "agent":
            model_dir = args.model_dir or write_tiny_model(Path(tmp) / "tiny-qwen3", tokenizer="qwen3", seed=0)
            workload = AgentWorkload(sessions=args.sessions, turns=args.turns)
            report |= run_agent(model_dir, workload, EngineConfig(prefill_chunk=args.prefill_chunk), pad_id=QWEN3_TOKENS.pad_token_id)
            report["threads"] = args.threads
        elif args.model_dir is not None:
            report |= measure(args.model_dir, args)
        else:
            if args.tokenizer in ("qwen3", "both"):
                report |= measure(write_tiny_model(Path(tmp) / "tiny-qwen3", tokenizer="qwen3", seed=0), args)
            if args.tokenizer in ("bytes", "both"):
                figures = measure(write_tiny_model(Path(tmp) / "tiny-bytes", tokenizer="bytes", seed=0), args)
                prefix = "bytes_" if args.tokenizer == "both" else ""
                report |= {f"{prefix}{k}": v for k, v in figures.items()}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
