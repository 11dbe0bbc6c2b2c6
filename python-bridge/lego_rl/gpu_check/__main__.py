"""`python -m lego_rl.gpu_check [--dry-run-cpu] [--budget-s S]`: the GPU check's one JSON line (scripts/gpu-check).

Without a CUDA device it exits 2 at once with `{"check": "gpu", "ok": false, "error": ...}`.
`--dry-run-cpu` runs the same parts on the CPU with the tiny model, so the line's shape and
the code path are tested where no GPU is; that line says `"dry_run": true, "device": "cpu"`
and its figures are not GPU figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ..model import load_model, save_model
from .measure import PEARSON_WITH_R3_MIN, GpuCheckConfig, measure
from .server import probe_server


def _emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _server_copy(model_dir: Path, out: Path) -> Path:
    """The policy with experts written one by one, as vLLM's and SGLang's Qwen3-MoE loaders read them."""
    save_model(load_model(model_dir), out, expert_layout="per_expert")
    for extra in model_dir.iterdir():
        if extra.suffix == ".json" and not (out / extra.name).exists():
            shutil.copy(extra, out / extra.name)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run-cpu", action="store_true", help="run every part on the CPU with the tiny model (not GPU figures)")
    parser.add_argument("--budget-s", type=float, default=330.0, help="seconds for the whole check, the server included")
    parser.add_argument("--tests", choices=["passed", "failed", "not run"], default="not run",
                        help="outcome of the GPU tests scripts/gpu-check ran before (copied into the line)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    base: dict[str, Any] = {"check": "gpu", "dry_run": args.dry_run_cpu, "torch": torch.__version__, "cuda": torch.version.cuda,
                            "tests": args.tests}
    if not args.dry_run_cpu and not torch.cuda.is_available():
        _emit(base | {"ok": False, "device": None, "error": "no CUDA device: torch.cuda.is_available() is False "
                      "(run on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --dry-run-cpu)"})
        return 2
    device = "cpu" if args.dry_run_cpu else "cuda"
    config = GpuCheckConfig(device=device, size="tiny" if args.dry_run_cpu else "small",
                            engine_requests=8 if args.dry_run_cpu else 64, engine_max_tokens=16 if args.dry_run_cpu else 128,
                            gspo_steps=1 if args.dry_run_cpu else 4, rollout_max_tokens=12 if args.dry_run_cpu else 64)
    line = base | {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        folder = Path(tmp)
        try:
            line |= measure(folder / "policy", config)
        except Exception as error:  # one line naming the part that broke is this entry point's whole contract
            _emit(line | {"ok": False, "error": f"{type(error).__name__}: {error}", "seconds": round(time.monotonic() - started, 1)})
            return 1
        if device == "cuda":
            torch.cuda.empty_cache()  # leave the GPU to the server
            left = args.budget_s - (time.monotonic() - started)
            line["server"] = probe_server(_server_copy(folder / "policy", folder / "served"), device=device, budget_s=left)
        else:
            line["server"] = probe_server(folder / "policy", device=device, budget_s=0)
    server_ok = not str(line["server"]["status"]).startswith("failed")
    line["ok"] = (line["pearson_r3"] >= PEARSON_WITH_R3_MIN and line["pearson_r3"] >= line["pearson_no_r3"]
                  and line["gspo_step_s"] is not None and server_ok and args.tests != "failed")
    line["seconds"] = round(time.monotonic() - started, 1)
    _emit(line)
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
