"""`python -m lego_rl.trainer.bench` (pnpm bench:trainer): GSPO step time and tokens/s vs TRL.

Both sides run the same full on-policy step on the same tiny MoE weights and the
same batch: 4 prompts x 8 completions of at most 12 tokens at temperature 1,
reward = share of lowercase letters, GSPO (sequence-level ratio, clip 3e-4/4e-4,
beta 0), one optimizer step per batch, fp32 on CPU.
  lego-rl: embedded engine samples (KV cache, continuous batching, decode steps
           compiled: EngineConfig.compile_decode, compiled during warm-up), the batch
           travels as Arrow bytes, the trainer recomputes with routing replay,
           steps, and syncs weights back to the engine.
  TRL:     GRPOTrainer with importance_sampling_level="sequence" on
           transformers' Qwen3MoeForCausalLM loaded from the same directory.
The two sides alternate in blocks of --block steps (lego-rl's block runs from a callback
after each TRL block, outside TRL's timing), so both see the same background load: on a
shared machine, measuring one whole side after the other swung the ratio by +-40%.
Blocks rather than single steps keep each side's weights warm in the caches, as they are
in a process that only trains. Step time is the median over the measured
steps after warm-up. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ..engine import Engine, EngineConfig
from ..model import load_model
from ..model import write_tiny_model
from ..schema import decode_batch
from .advantages import group_advantages
from .driver import outcome_of
from .packing import pack_step, trajectories_of
from .step import PolicyUpdater, StepConfig
from ..toy import ToyTask, rollout_batch

PROMPTS = tuple(f"task {i}: write" for i in range(4))
LOWERCASE = frozenset(range(ord("a"), ord("z") + 1))
GROUP, MAX_TOKENS, LR = 8, 12, 3e-3


def _lowercase_share(completion: str) -> float:
    return sum("a" <= c <= "z" for c in completion) / max(1, len(completion.encode()))


class LegoSteps:
    """The lego-rl side: one full step (sample, ship as Arrow, update, sync) per call."""

    def __init__(self, model_dir: Path, *, compile_decode: bool) -> None:
        self.trainer = load_model(model_dir)
        # compile_decode as a training job's cluster.engine_compile_decode: decode steps as one compiled graph.
        self.engine = Engine(load_model(model_dir), EngineConfig(dtype="float32", compile_decode=compile_decode))
        self.updater = PolicyUpdater(self.trainer, StepConfig(lr=LR))
        self.task = ToyTask(prompts=tuple(tuple(p.encode()) for p in PROMPTS), target_token_ids=LOWERCASE,
                            group_size=GROUP, max_tokens=MAX_TOKENS)
        self.full: list[float] = []
        self.update: list[float] = []
        self.tokens: list[int] = []

    def step(self) -> None:
        step = len(self.full)
        config = self.trainer.config
        started = time.perf_counter()
        data, _ = rollout_batch(self.engine, self.task, step)
        trajectories = trajectories_of([decode_batch(data)])
        advantages = group_advantages([outcome_of(t) for t in trajectories.values()])
        update_started = time.perf_counter()
        tokens = 0
        if advantages.trajectory_ids:
            packed = pack_step(trajectories, advantages, layers=len(config.moe_layers), top_k=config.num_experts_per_tok)
            self.updater.update(packed)
            self.engine.update_weights(self.trainer.state_dict(), step + 1)
            tokens = packed.source_tokens  # the trajectories' tokens, a shared prompt counted per copy
        done = time.perf_counter()
        self.full.append(done - started)
        self.update.append(done - update_started)
        self.tokens.append(tokens)

    def summary(self, warmup: int) -> dict[str, float]:
        update = self.update[warmup:]
        return {
            "step_s": statistics.median(self.full[warmup:]),
            "update_s": statistics.median(update),
            "tokens_per_s": sum(self.tokens[warmup:]) / sum(update),
            # TRL runs forward, backward and the optimizer on every step; ours skips a step whose groups all have
            # equal rewards. Such steps would flatter the median, so the bench reports how many it measured.
            "steps_without_update": sum(1 for t in self.tokens[warmup:] if t == 0),
        }


def bench_interleaved(
    model_dir: Path, steps: int, warmup: int, block: int, *, compile_decode: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """(lego-rl, TRL) figures; a block of lego-rl steps runs after each block of TRL steps."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    lego = LegoSteps(model_dir, compile_decode=compile_decode)

    class Alternate(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            self.times.append(time.perf_counter() - self._start)
            if len(self.times) % block == 0 or len(self.times) == warmup + steps:
                while len(lego.full) < len(self.times):
                    lego.step()

    def reward(completions: list[str], **kwargs: object) -> list[float]:
        return [_lowercase_share(c) for c in completions]

    timer = Alternate()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, use_cpu=True, bf16=False, fp16=False, report_to=[], save_strategy="no", logging_steps=10_000,
            max_steps=warmup + steps, learning_rate=LR, per_device_train_batch_size=len(PROMPTS) * GROUP,
            num_generations=GROUP, max_completion_length=MAX_TOKENS, temperature=1.0, beta=0.0,
            importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4, loss_type="grpo",
            dataloader_num_workers=0, seed=0, disable_tqdm=True,
            # Like for like: TRL's GRPOConfig turns gradient checkpointing on by default (a second forward in
            # backward) and adds the MoE router's load-balancing loss; our step does neither.
            gradient_checkpointing=False, router_aux_loss_coef=0.0,
        )
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": list(PROMPTS) * GROUP * (warmup + steps)}),
            processing_class=AutoTokenizer.from_pretrained(model_dir),
            callbacks=[timer],
        )
        trainer.train()
    return lego.summary(warmup), {"step_s": statistics.median(timer.times[warmup:])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.trainer.bench", description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--block", type=int, default=5, help="steps each side runs before the other takes over")
    parser.add_argument("--eager-decode", action="store_true",
                        help="our engine decodes eagerly (compile_decode off), for comparison with the compiled default")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_tiny_model(Path(tmp) / "tiny", tokenizer="bytes", seed=0)
        ours, trl = bench_interleaved(model_dir, args.steps, args.warmup, args.block, compile_decode=not args.eager_decode)
        print(f"lego-rl  GSPO step {ours['step_s'] * 1000:.0f} ms (update {ours['update_s'] * 1000:.0f} ms, "
              f"{ours['tokens_per_s']:.0f} tokens/s in the update)", flush=True)
        print(f"TRL      GRPOTrainer(importance_sampling_level='sequence') step {trl['step_s'] * 1000:.0f} ms", flush=True)
    print(json.dumps({
        "bench": "trainer",
        "step_s": round(ours["step_s"], 4),
        "update_s": round(ours["update_s"], 4),
        "tokens_per_s": round(ours["tokens_per_s"], 1),
        "trl_step_s": round(trl["step_s"], 4),
        "vs_trl": round(trl["step_s"] / ours["step_s"], 2),
        "trl_gradient_checkpointing": False,
        "trl_aux_loss": False,
        "engine_compile_decode": not args.eager_decode,
        "steps_without_update": ours["steps_without_update"],
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
