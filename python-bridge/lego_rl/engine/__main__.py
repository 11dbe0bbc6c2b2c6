"""`python -m lego_rl.engine --model DIR [--bind ADDR] [--dtype float32|bfloat16]`: serve the engine over ZeroMQ.

Prints one JSON line `{"type": "listening", "address": ..., "model": ...}` once bound
(bind `tcp://127.0.0.1:*` and read the port from it). SIGINT or SIGTERM drains: it prints
`{"type": "draining"}`, refuses new requests, lets the accepted ones finish (at most
--drain-timeout-s), then prints `{"type": "stopped", ...}` and exits 0. Weight updates
arrive as `update_weights` frames on the same socket (a trainer's `--sync-engine ADDRESS`),
applied by --weight-update-policy; a failing step fails only its requests, with its
traceback on stderr (docs/model.md "Serving over ZeroMQ").
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

import torch

from .engine import EngineConfig
from .server import EngineServerConfig
from ..entry import run_entry

_DEFAULTS = EngineConfig()
_SERVER_DEFAULTS = EngineServerConfig(model_dir="")


def _print(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.engine", description=__doc__)
    parser.add_argument("--model", required=True, help="model directory (config.json, model.safetensors)")
    parser.add_argument("--bind", default="tcp://127.0.0.1:5556", help="ZeroMQ endpoint (tcp://127.0.0.1:* picks a free port) or unix:///PATH (a Unix socket for a proxy on this host)")
    parser.add_argument("--name", default=None, help="model name clients may ask for (default: the directory's name)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-running", type=int, default=_DEFAULTS.max_running)
    parser.add_argument("--max-context", type=int, default=None, help="prompt + completion limit (default: the model's)")
    parser.add_argument("--max-batch-tokens", type=int, default=_DEFAULTS.max_batch_tokens, help="tokens per forward pass")
    parser.add_argument("--prefill-chunk", type=int, default=_DEFAULTS.prefill_chunk, help="prefill chunk (and prefix cache unit), tokens")
    parser.add_argument("--prefix-cache-mib", type=float, default=_DEFAULTS.prefix_cache_mib, help="prefix cache memory; 0 turns it off")
    parser.add_argument("--compile-decode", action="store_true",
                        help="run steps where every request decodes as one compiled graph (seconds to compile once, then faster steps)")
    parser.add_argument("--policy-version", type=int, default=0, help="version of the weights in --model")
    parser.add_argument("--weight-update-policy", choices=("continue", "drain"), default=_SERVER_DEFAULTS.weight_update_policy,
                        help="requests in flight at a weight update: go on under the new weights, or finish on the old ones first")
    parser.add_argument("--drain-timeout-s", type=float, default=_SERVER_DEFAULTS.drain_timeout_s,
                        help="on SIGTERM, how long accepted requests get to finish")
    # One intra-op thread by default: on small shared machines a second one stalls every small op (docs/model.md).
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = EngineServerConfig(
        model_dir=args.model,
        bind=args.bind,
        model_name=args.name,
        engine=EngineConfig(dtype=args.dtype, device=args.device, max_running=args.max_running, max_context=args.max_context,
                            max_batch_tokens=args.max_batch_tokens, prefill_chunk=args.prefill_chunk, prefix_cache_mib=args.prefix_cache_mib,
                            compile_decode=args.compile_decode),
        policy_version=args.policy_version,
        weight_update_policy=args.weight_update_policy,
        drain_timeout_s=args.drain_timeout_s,
    )
    server = config.build()
    stop = threading.Event()

    def on_signal(*_: Any) -> None:
        if not stop.is_set():
            stop.set()  # before the line: a request sent after reading it is refused, never half-served
            _print({"type": "draining", "timeout_s": config.drain_timeout_s})

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _print({"type": "listening", "address": server.address, "model": server.model_name, "policy_version": server.engine.policy_version})
    try:
        server.serve(stop)
    finally:
        _print({"type": "stopped", "stats": server.stats, "engine": server.engine.stats})
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.engine"))
