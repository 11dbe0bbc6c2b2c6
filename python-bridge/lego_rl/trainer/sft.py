"""Supervised warm start on demonstrations: next-token loss on the policy's own tokens only.

    python -m lego_rl.trainer.sft --spool DIR --model-dir DIR --out DIR [--steps N]

1. Demonstrations are Trajectory batches exactly as the rollout worker ships them (a
   receiver spool's `batches/*.lgrb`, or a folder of `*.arrow` batches): the token ids
   the proxy recorded, so what is trained is what the policy would have to emit through
   the same harness, chat template and tool-call format.
2. Only successful demonstrations train (status `ok`, reward 1); the rest are counted.
3. The loss is the mean cross-entropy of the trainable tokens (`loss_mask` = 1: the
   assistant's sampled tokens). Prompts and tool outputs are inputs only. Packing is the
   GSPO trainer's own (`pack_step`), so the masked positions are excluded by the same
   code that excludes them from the policy loss.
4. Routing is not replayed: a supervised pass has no rollout whose experts must be
   matched, and scripted demonstrations record none.
5. The output is an HF-layout model directory (weights, config, tokenizer, generation
   config), which the engine (`python -m lego_rl.engine --model`) and the GSPO trainer
   (`python -m lego_rl.cluster.train --model`) load as they load any model; `sft.json`
   beside it says what it was trained on and the loss per step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from ..entry import run_entry
from ..model import load_model, read_config, save_model
from ..schema import SchemaError, Trajectory, batch_records, decode_batch
from .advantages import GroupAdvantages
from .packing import PackedStep, pack_step

# Files of a model directory that are not weights and pass through unchanged.
_MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


class SftDataError(ValueError):
    """The demonstrations cannot be used: missing, unreadable, or nothing to learn from."""

    hint = "generate demonstrations with `lego rollout --harness reference --engine scripted-gold` into a receiver spool"


@dataclass(frozen=True, kw_only=True, slots=True)
class SftConfig:
    steps: int = 60
    """Optimizer steps."""
    batch_trajectories: int = 4
    """Demonstrations per step (drawn in a seeded shuffled order, epoch after epoch)."""
    lr: float = 1e-3
    """AdamW learning rate (a tiny randomly initialised model needs a large one)."""
    warmup_steps: int = 5
    """Linear warm-up, then cosine decay to 10% of `lr`."""
    max_grad_norm: float = 1.0
    seed: int = 0
    stop_at_action_probability: float | None = None
    """Stop after the first step at which `action_probability` over every demonstration reaches this; `steps`
    is then a cap (and still sets the schedule). A tiny model from scratch goes from saying the demonstrated
    action almost never to almost always within ~10 steps, at a step that moves with the seed: a fixed step
    count left one seed's warm start at 0.2 and another's at 0.8 (docs/demo.md)."""
    check_every: int = 2
    """Steps between two `action_probability` checks (one forward pass over every demonstration)."""


@dataclass(kw_only=True, slots=True)
class Demonstrations:
    trajectories: list[Trajectory]
    skipped: dict[str, int] = field(default_factory=dict)
    """Trajectories left out, by reason (not_ok, reward_below_1, no_trainable_tokens)."""
    files: int = 0


def _payloads(spool: Path) -> list[tuple[Path, bytes | pa.Buffer]]:
    """Every batch payload under `spool`: a receiver spool (batches/*.lgrb) or a folder of *.arrow batches."""
    from ..transport import SpoolFormatError, read_spool_file

    if not spool.is_dir():
        raise SftDataError(f"demonstration spool {spool} is not a folder")
    folder = spool / "batches" if (spool / "batches").is_dir() else spool
    spooled = sorted(folder.glob("*.lgrb"))
    arrow = sorted(folder.glob("*.arrow"))
    if not spooled and not arrow:
        raise SftDataError(f"no demonstration batches (*.lgrb or *.arrow) in {folder}")
    out: list[tuple[Path, bytes | pa.Buffer]] = []
    for path in spooled:
        try:
            out.append((path, read_spool_file(path).payload))
        except SpoolFormatError as error:
            raise SftDataError(f"demonstration batch {path} is unreadable: {error}") from error
    for path in arrow:
        out.append((path, pa.memory_map(str(path)).read_buffer()))
    return out


def load_demonstrations(spool: Path) -> Demonstrations:
    """The successful, trainable demonstrations of a spool; any unreadable batch is an error, not a skip."""
    demos = Demonstrations(trajectories=[])
    seen: set[str] = set()
    for path, payload in _payloads(spool):
        try:
            decoded = decode_batch(payload, expect="Trajectory")
        except SchemaError as error:
            raise SftDataError(f"demonstration batch {path} is not a valid Trajectory batch: {error}") from error
        demos.files += 1
        for trajectory in batch_records(decoded):
            if trajectory.trajectory_id in seen:
                continue  # a batch redelivered into the spool twice is one demonstration
            seen.add(trajectory.trajectory_id)
            reason = None
            if trajectory.status != "ok":
                reason = "not_ok"
            elif trajectory.reward is None or trajectory.reward < 1.0:
                reason = "reward_below_1"
            elif not any(int(s.loss_mask.sum()) for s in trajectory.segments):
                reason = "no_trainable_tokens"
            if reason:
                demos.skipped[reason] = demos.skipped.get(reason, 0) + 1
            else:
                demos.trajectories.append(trajectory)
    if not demos.trajectories:
        raise SftDataError(
            f"{spool} holds no successful demonstration with trainable tokens (left out: {demos.skipped or 'none read'})"
        )
    return demos


def pack_demonstrations(trajectories: list[Trajectory], *, layers: int, top_k: int) -> PackedStep:
    """One packed step of the demonstrations' trainable tokens (the GSPO packing, routing not replayed)."""
    by_id = {t.trajectory_id: t for t in trajectories}
    select = GroupAdvantages(
        trajectory_ids=list(by_id), advantages=np.ones(len(by_id), dtype=np.float32),
        groups_trained=0, groups_skipped_identical=0, groups_skipped_singleton=0,
    )
    return pack_step(by_id, select, layers=layers, top_k=top_k, replay=False)


def sft_loss(model: torch.nn.Module, step: PackedStep) -> torch.Tensor:
    """Mean next-token cross-entropy over the step's trainable tokens only."""
    output = model(step.input_ids_T, seq_lens=step.seq_lens, logits_rows=step.logit_rows_R, prefix_of=step.prefix_of)
    return torch.nn.functional.cross_entropy(output.logits.float(), step.targets_R)


def _lr_at(step: int, config: SftConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def action_probability(model: torch.nn.Module, demos: list[Trajectory]) -> float:
    """Mean over the demonstrations of the probability that the model, sampling at temperature 1, says each
    one's whole action: teacher-forced, the product of its trainable tokens' probabilities."""
    moe = model.config  # type: ignore[attr-defined]
    step = pack_demonstrations(demos, layers=len(moe.moe_layers), top_k=moe.num_experts_per_tok)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(step.input_ids_T, seq_lens=step.seq_lens, logits_rows=step.logit_rows_R, prefix_of=step.prefix_of)
            logprobs_R = torch.log_softmax(output.logits.float(), dim=-1).gather(1, step.targets_R[:, None])[:, 0]
            per_sequence = torch.zeros(len(step.seq_lens), dtype=torch.float64).index_add_(0, step.sequence_R, logprobs_R.double())
    finally:
        model.train(was_training)
    return float(per_sequence.exp().mean())


def train_sft(model: torch.nn.Module, demos: list[Trajectory], config: SftConfig, *, log=None) -> list[dict[str, float]]:  # type: ignore[no-untyped-def]
    """Runs up to `config.steps` updates in place (fewer when `stop_at_action_probability` is reached); returns one metrics row per step."""
    moe = model.config  # type: ignore[attr-defined]
    layers, top_k = len(moe.moe_layers), moe.num_experts_per_tok
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0, fused=True)
    order: list[int] = []
    rows: list[dict[str, float]] = []
    model.train()
    for step in range(config.steps):
        picked: list[Trajectory] = []
        while len(picked) < min(config.batch_trajectories, len(demos)):
            if not order:
                order = list(rng.permutation(len(demos)))
            picked.append(demos[order.pop()])
        started = time.perf_counter()
        packed = pack_demonstrations(picked, layers=layers, top_k=top_k)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        loss = sft_loss(model, packed)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm))
        optimizer.step()
        row = {"step": step + 1, "loss": float(loss.detach()), "grad_norm": grad_norm, "lr": optimizer.param_groups[0]["lr"],
               "trainable_tokens": int(packed.targets_R.numel()), "time_s": time.perf_counter() - started}
        target = config.stop_at_action_probability
        if target is not None and ((step + 1) % config.check_every == 0 or step + 1 == config.steps):
            row["action_probability"] = action_probability(model, demos)
        rows.append(row)
        if log is not None:
            log(row)
        if target is not None and "action_probability" in row and row["action_probability"] >= target:
            break
    return rows


def write_model_dir(model: torch.nn.Module, source: Path, out: Path) -> None:
    """An HF-layout directory at `out`: the trained weights plus the source's tokenizer and generation config."""
    out.mkdir(parents=True, exist_ok=True)
    save_model(model, out)  # type: ignore[arg-type]
    for name in _MODEL_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.trainer.sft", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spool", type=Path, required=True, help="demonstrations: a receiver spool or a folder of *.arrow batches")
    parser.add_argument("--model-dir", type=Path, required=True, help="HF-layout model to start from")
    parser.add_argument("--out", type=Path, required=True, help="model directory to write (created)")
    defaults = SftConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch", type=int, default=defaults.batch_trajectories, help="demonstrations per step")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--stop-at-action-probability", type=float, default=None, metavar="P",
                        help="stop once the demonstrations' mean whole-action probability reaches P (0 < P <= 1); --steps is then a cap")
    parser.add_argument("--threads", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch must be at least 1")
    if args.stop_at_action_probability is not None and not 0.0 < args.stop_at_action_probability <= 1.0:
        parser.error(f"--stop-at-action-probability must be in (0, 1], got {args.stop_at_action_probability}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    demos = load_demonstrations(args.spool)  # before the model: a bad spool fails fast
    read_config(args.model_dir)
    model = load_model(args.model_dir)
    config = SftConfig(steps=args.steps, batch_trajectories=args.batch, lr=args.lr, seed=args.seed,
                       stop_at_action_probability=args.stop_at_action_probability)
    started = time.perf_counter()
    rows = train_sft(model, demos.trajectories, config, log=lambda r: print(json.dumps({"event": "sft_step", **r}), file=sys.stderr, flush=True))
    write_model_dir(model, args.model_dir, args.out)
    head, tail = rows[: max(1, len(rows) // 10)], rows[-max(1, len(rows) // 10):]
    summary = {
        "event": "sft_done", "model_dir": str(args.out), "source_model": str(args.model_dir), "spool": str(args.spool),
        "demonstrations": len(demos.trajectories), "skipped": demos.skipped, "batches": demos.files,
        "tasks": sorted({t.task_id for t in demos.trajectories}), "steps": len(rows),
        "loss_first": sum(r["loss"] for r in head) / len(head), "loss_last": sum(r["loss"] for r in tail) / len(tail),
        "seconds": time.perf_counter() - started, "config": {"lr": config.lr, "batch": config.batch_trajectories, "seed": config.seed,
                                                             "max_steps": config.steps, "stop_at_action_probability": config.stop_at_action_probability},
        "action_probability": next((r["action_probability"] for r in reversed(rows) if "action_probability" in r), None),
    }
    (args.out / "sft.json").write_text(json.dumps({**summary, "log": rows}, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "tasks"}))
    return 0


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.trainer.sft"))
