"""A real vLLM or SGLang server in the GPU check, when one is importable in this Python.

The device machine reaches no package index, so the server is used only if it is installed
already; otherwise the check says so (`status: skipped: ...`) instead of failing. When one is
there: start it on the check's policy (per-expert layout, as the servers' Qwen3-MoE loaders
read it; token ids in and out, no tokenizer), send concurrent requests of prompt ids asking
for routed experts, and report tokens/s and whether every response carried routing. Every
wait is bounded by the check's remaining budget; the server is stopped in `finally`.
"""

from __future__ import annotations

import base64
import concurrent.futures
import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REQUESTS, MAX_TOKENS = 16, 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _command(kind: str, model_dir: Path, port: int) -> list[str]:
    if kind == "vllm":
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--port", str(port),
                "--skip-tokenizer-init", "--enable-return-routed-experts", "--logprobs-mode", "raw_logprobs",
                "--served-model-name", "policy", "--max-model-len", "1024", "--gpu-memory-utilization", "0.3", "--enforce-eager"]
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_dir), "--port", str(port),
            "--skip-tokenizer-init", "--enable-return-routed-experts", "--mem-fraction-static", "0.3"]


def _one(kind: str, origin: str, prompt: list[int], seed: int, timeout: float) -> tuple[int, bool]:
    """(completion tokens, routing present) of one request."""
    if kind == "vllm":
        reply = _post(f"{origin}/v1/completions", {"model": "policy", "prompt": prompt, "max_tokens": MAX_TOKENS, "seed": seed,
                                                    "logprobs": 1, "return_tokens_as_token_ids": True}, timeout)
        choice = reply["choices"][0]
        tokens = len(choice.get("logprobs", {}).get("tokens") or choice.get("token_ids") or [])
        routed = choice.get("routed_experts")
    else:
        reply = _post(f"{origin}/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": MAX_TOKENS},
                                             "return_logprob": True, "return_routed_experts": True}, timeout)
        tokens = len(reply.get("output_ids") or [])
        routed = reply.get("meta_info", {}).get("routed_experts")
    return tokens, isinstance(routed, str) and len(base64.b64decode(routed)) > 0


def probe_server(model_dir: Path, *, device: str, budget_s: float) -> dict[str, Any]:
    if not device.startswith("cuda"):
        return {"kind": None, "status": "skipped: CPU dry run (vLLM and SGLang serve on GPUs)"}
    kind = next((k for k in ("vllm", "sglang") if importlib.util.find_spec(k) is not None), None)
    if kind is None:
        return {"kind": None, "status": "skipped: neither vllm nor sglang is importable in this Python "
                                        "(the device machine reaches no package index to install one)"}
    if budget_s < 60:
        return {"kind": kind, "status": f"skipped: {budget_s:.0f} s of the check's budget left, a server needs more"}
    port = _free_port()
    origin = f"http://127.0.0.1:{port}"
    log = model_dir.parent / f"{kind}-server.log"
    deadline = time.monotonic() + budget_s
    with open(log, "wb") as sink:
        server = subprocess.Popen(_command(kind, model_dir, port), stdout=sink, stderr=subprocess.STDOUT)
        try:
            while True:  # bounded: the deadline, or the server exiting
                if server.poll() is not None:
                    tail = log.read_text(errors="replace")[-600:]
                    return {"kind": kind, "status": f"failed: the server exited with {server.returncode} before answering", "log_tail": tail}
                if time.monotonic() > deadline:
                    return {"kind": kind, "status": f"failed: no answer on {origin}/health within the budget"}
                try:
                    with urllib.request.urlopen(f"{origin}/health", timeout=2):
                        break
                except (urllib.error.URLError, OSError):
                    time.sleep(1)  # polling a starting server's health endpoint: nothing to wait on instead
            prompts = [list(f"def f{i}(x):".encode()) for i in range(REQUESTS)]
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(REQUESTS) as pool:
                answers = list(pool.map(lambda i: _one(kind, origin, prompts[i], i, max(5.0, deadline - time.monotonic())),
                                        range(REQUESTS)))
            seconds = time.perf_counter() - started
            tokens = sum(t for t, _ in answers)
            return {"kind": kind, "status": "ok", "requests": REQUESTS, "tokens": tokens,
                    "tokens_per_s": round(tokens / seconds, 1), "routed_experts": all(r for _, r in answers)}
        except (urllib.error.URLError, OSError, KeyError, ValueError) as error:
            return {"kind": kind, "status": f"failed: {type(error).__name__}: {error}"}
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


__all__ = ["probe_server"]
