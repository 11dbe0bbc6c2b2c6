"""Weight sync to external inference servers: write a versioned HF directory, tell each server to load it.

    trainer weights (state dict or module) --DiskWeightPublisher--> <root>/v<N>/  (atomic)
        --SglangWeightSync--> POST /update_weights_from_disk, then read /get_model_info back
        --VllmWeightSync----> POST /collective_rpc (LegoWeightReloader), then /reset_prefix_cache
        --EngineServerWeightSync--> ZeroMQ update_weights to `python -m lego_rl.engine`, reply weights_updated

1. Disk is the transport: both servers already load HF safetensors directories, every
   tensor-parallel rank reads what it needs, and a failed load leaves the old weights
   serving. The root must be visible to the servers at the same path (shared or local disk).
2. Every publish carries the policy version; each publisher refuses a version that is not
   above the last one it published, and the servers report the version they serve
   (SGLang's `weight_version`, the vLLM extension's `lego_served_weights`) so the rollout
   side can enforce its staleness bound from the server itself.
3. The directory holds the expert tensors per expert (`experts.{e}.gate_proj.weight`), the
   layout Qwen hub checkpoints ship and vLLM/SGLang's Qwen3-MoE loaders map, and drops the
   tied `lm_head.weight` as `save_pretrained` does. `lego_rl.model.load_model` reads it back.
4. Stdlib HTTP only (urllib), no retries: a failed sync raises WeightSyncError with the
   server, version, HTTP status and the server's own message, and training stops there.
   The embedded engine's ZeroMQ server is told over its own socket (one DEALER per publish);
   its Error reply becomes a WeightSyncError the same way (status None, the error code in
   the message).
No Ray here: the publishers run wherever the weights are (driver or a trainer rank).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Union

import torch
from safetensors.torch import save_file

from ..model import ExpertLayout, split_experts
from ..schema import (SCHEMA_VERSION, ControlMessageError, EngineHello, EngineInfo, Error, UpdateWeights, WeightsUpdated,
                      WeightVersion, decode_control, encode_control)
from ..durable import fsync_dir, fsync_file
from ..engine import ClientConnection
from .vllm_worker_extension import LOAD_METHOD, MANIFEST, SERVED_METHOD, read_manifest_version

Weights = Union[torch.nn.Module, Mapping[str, torch.Tensor], Path]
"""What a publisher is handed: the live module, a full HF-named state dict, or a directory already written."""

WeightsDtype = Literal["float32", "bfloat16", "float16"]


class WeightSyncError(RuntimeError):
    """A server did not take the weights (or a publish was refused); says which server, which version and why."""

    def __init__(self, *, server_url: str, version: int, message: str, status: int | None = None) -> None:
        where = f"HTTP {status}" if status is not None else "no HTTP status"
        super().__init__(f"weight sync of v{version} to {server_url} failed ({where}): {message}")
        self.server_url = server_url
        self.version = version
        self.status = status
        self.server_message = message


class WeightPublisher(Protocol):
    """Makes the weights of policy `version` live somewhere; raises WeightSyncError when it cannot."""

    def publish(self, version: int, weights: Weights) -> None: ...


# ---- disk ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class DiskPublishConfig:
    """Where and how versioned weight directories are written."""

    root: Path
    """Parent of the v<N>/ directories; servers must see it at this same path."""
    model_dir: Path
    """The policy's HF directory: config.json (and tokenizer/generation files) are copied from it."""
    expert_layout: ExpertLayout = "per_expert"
    """per_expert is what vLLM/SGLang's Qwen3-MoE weight loaders map (gate_proj/up_proj/down_proj per expert)."""
    dtype: WeightsDtype | None = None
    """Cast on write (bfloat16 halves the bytes servers read); None keeps the trainer's dtype."""
    keep_versions: int = 2
    """Directories kept after a successful publish; older ones are deleted (a server may still read the previous one)."""
    copy_files: tuple[str, ...] = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
    """Files copied from model_dir when present (config.json must be), so v<N>/ is a complete HF model."""


_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def version_dir_name(version: int) -> str:
    return f"v{version}"


def _published_versions(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    return sorted(int(p.name[1:]) for p in root.iterdir() if p.is_dir() and p.name[:1] == "v" and p.name[1:].isdigit())


@dataclass(kw_only=True, slots=True)
class DiskWeightPublisher:
    """Writes <root>/v<N>/ atomically, then hands that directory to each server sync in order."""

    config: DiskPublishConfig
    servers: Sequence[WeightPublisher] = ()
    """Told to load the directory once it is complete (e.g. SglangWeightSync, VllmWeightSync)."""
    last_version: int | None = None
    """Highest version published; starts from the directories already under root, so a restarted trainer cannot go back."""
    _tie_word_embeddings: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        config_path = self.config.model_dir / "config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"{config_path}: the weights directory needs the policy's config.json")
        self._tie_word_embeddings = bool(json.loads(config_path.read_text()).get("tie_word_embeddings", False))
        if self.last_version is None:
            existing = _published_versions(self.config.root)
            self.last_version = existing[-1] if existing else None

    def publish(self, version: int, weights: Weights) -> None:
        if self.last_version is not None and version <= self.last_version:
            raise WeightSyncError(server_url=str(self.config.root), version=version,
                                  message=f"refusing to publish v{version}: v{self.last_version} is already published")
        path = weights if isinstance(weights, Path) else self.write(version, weights)
        for server in self.servers:
            server.publish(version, path)
        self.last_version = version
        self._prune()

    def write(self, version: int, weights: torch.nn.Module | Mapping[str, torch.Tensor]) -> Path:
        """Write v<version>/ (config, safetensors, manifest) into a staging folder, fsync, rename; returns its path."""
        root = self.config.root.absolute()  # servers resolve a relative path against their own cwd
        root.mkdir(parents=True, exist_ok=True)
        final = root / version_dir_name(version)
        staging = root / f".{final.name}.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name in self.config.copy_files:
            source = self.config.model_dir / name
            if source.is_file():
                shutil.copyfile(source, staging / name)
        tensors = self._tensors(weights)
        save_file(tensors, str(staging / "model.safetensors"),
                  metadata={"format": "pt", "lego_rl.weight_version": str(version)})
        manifest = WeightVersion(version=version, published_at_ms=time.time() * 1000.0, checkpoint_path=str(final))
        (staging / MANIFEST).write_text(json.dumps(asdict(manifest)) + "\n")
        for child in staging.iterdir():
            fsync_file(child)
        fsync_dir(staging)
        if final.exists():  # left by a run that crashed between this rename and its server sync
            shutil.rmtree(final)
        staging.rename(final)
        fsync_dir(root)
        return final

    def _tensors(self, weights: torch.nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if isinstance(weights, torch.nn.Module):
            named = dict(weights.named_parameters())  # a tied lm_head is listed once, as embed_tokens
        else:
            named = dict(weights)
        if self._tie_word_embeddings:
            named.pop("lm_head.weight", None)
        if self.config.expert_layout == "per_expert":
            named = split_experts(named)
        dtype = _DTYPES[self.config.dtype] if self.config.dtype is not None else None
        # clone(): split experts are views of one fused tensor, and safetensors refuses tensors sharing storage.
        return {name: t.detach().to(device="cpu", dtype=dtype or t.dtype).contiguous().clone() for name, t in named.items()}

    def _prune(self) -> None:
        for old in _published_versions(self.config.root)[: -self.config.keep_versions]:
            shutil.rmtree(self.config.root / version_dir_name(old), ignore_errors=True)


# ---- HTTP ---------------------------------------------------------------------------


# Inference servers sit on the cluster network: an http_proxy inherited from the environment must not route to them.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _call(base_url: str, path: str, *, version: int, timeout_s: float, body: dict[str, Any] | None = None,
          method: str = "POST") -> Any:
    """One JSON request; the parsed JSON reply (None for an empty body) or WeightSyncError with the server's words."""
    url = base_url.rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if body is not None else {})
    try:
        with _OPENER.open(request, timeout=timeout_s) as reply:
            raw = reply.read()
    except urllib.error.HTTPError as error:
        raise WeightSyncError(server_url=url, version=version, status=error.code,
                              message=_server_message(error.read())) from error
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise WeightSyncError(server_url=url, version=version, message=f"unreachable: {error}") from error
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as error:
        raise WeightSyncError(server_url=url, version=version, status=200,
                              message=f"reply is not JSON: {raw[:200]!r}") from error


def _server_message(raw: bytes) -> str:
    # SGLang answers {"success": false, "message": ...}; FastAPI errors (vLLM) answer {"detail": ...}.
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:2000]
    if isinstance(parsed, dict):
        for key in ("message", "detail", "error"):
            if key in parsed:
                return str(parsed[key])
    return json.dumps(parsed)[:2000]


def _weights_dir(server_url: str, version: int, weights: Weights) -> Path:
    """The directory a server sync loads: must be a published v<version>/ (DiskWeightPublisher writes it)."""
    if not isinstance(weights, Path):
        raise WeightSyncError(server_url=server_url, version=version,
                              message="servers load from disk: put a DiskWeightPublisher in front of this sync")
    try:
        declared = read_manifest_version(weights)
    except ValueError as error:
        raise WeightSyncError(server_url=server_url, version=version, message=str(error)) from error
    if declared != version:
        raise WeightSyncError(server_url=server_url, version=version, message=f"{weights} holds v{declared}")
    return weights


def _refuse_stale(server_url: str, version: int, last: int | None) -> None:
    if last is not None and version <= last:
        raise WeightSyncError(server_url=server_url, version=version,
                              message=f"refusing v{version}: this server was already given v{last}")


# ---- SGLang -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SglangSyncConfig:
    """One SGLang server (`python -m sglang.launch_server`), or an sglang-router in front of several."""

    base_url: str
    """e.g. http://10.0.0.5:30000 (no trailing path)."""
    timeout_s: float = 600.0
    """Loading a large MoE from disk takes minutes; the call blocks until SGLang answers."""
    load_format: str | None = None
    """SGLang's load_format for the directory (None: its default, which reads safetensors)."""
    abort_all_requests: bool = False
    """True aborts in-flight generations instead of letting them finish on the old weights first."""
    model_info_path: str = "/get_model_info"
    """Read-back endpoint; newer SGLang also serves /model_info and logs /get_model_info as deprecated."""


@dataclass(kw_only=True, slots=True)
class SglangWeightSync:
    """POST /update_weights_from_disk with the version, check `success`, read the version back.

    Payload and reply as in sglang/srt/entrypoints/http_server.py (`update_weights_from_disk`,
    `UpdateWeightFromDiskReqInput` in sglang/srt/managers/io_struct.py): the body carries
    model_path, load_format, abort_all_requests and weight_version (a string); the reply is
    {"success", "message", "num_paused_requests"} with status 200, or 400 and success=false.
    The scheduler flushes the radix cache itself after a successful load (`flush_cache`
    defaults to true), so no separate /flush_cache call is needed. On success the tokenizer
    manager sets model_path to the new directory and weight_version to ours, both returned by
    /get_model_info.
    """

    config: SglangSyncConfig
    last_version: int | None = None

    def publish(self, version: int, weights: Weights) -> None:
        url = self.config.base_url
        _refuse_stale(url, version, self.last_version)
        path = _weights_dir(url, version, weights)
        body = {"model_path": str(path), "load_format": self.config.load_format,
                "abort_all_requests": self.config.abort_all_requests, "weight_version": str(version)}
        reply = _call(url, "/update_weights_from_disk", version=version, timeout_s=self.config.timeout_s, body=body)
        if not isinstance(reply, dict) or reply.get("success") is not True:
            message = reply.get("message", reply) if isinstance(reply, dict) else reply
            raise WeightSyncError(server_url=url + "/update_weights_from_disk", version=version, status=200,
                                  message=f"server did not confirm the load: {message}")
        info = self.model_info(version)
        served_path, served_version = info.get("model_path"), info.get("weight_version", str(version))
        # SGLang releases without weight_version report only model_path, which still names v<N>/.
        if served_path != str(path) or served_version != str(version):
            raise WeightSyncError(server_url=url + self.config.model_info_path, version=version, status=200,
                                  message=f"server reports model_path={served_path!r} weight_version={served_version!r}, "
                                          f"expected {str(path)!r} and {str(version)!r}")
        self.last_version = version

    def model_info(self, version: int = -1) -> dict[str, Any]:
        """SGLang's /get_model_info reply (model_path, weight_version, …); `version` only labels errors."""
        info = _call(self.config.base_url, self.config.model_info_path, version=version,
                     timeout_s=self.config.timeout_s, method="GET")
        if not isinstance(info, dict):
            raise WeightSyncError(server_url=self.config.base_url + self.config.model_info_path, version=version,
                                  status=200, message=f"expected a JSON object, got {info!r}")
        return info

    def served_version(self) -> int | None:
        """The lego-rl version the server serves (None: the weights it was started with).

        From weight_version, or else from the v<N> directory name in model_path (older SGLang).
        """
        info = self.model_info()
        value = info.get("weight_version")
        if isinstance(value, str) and value.isdigit():
            return int(value)
        name = Path(str(info.get("model_path", ""))).name
        return int(name[1:]) if name[:1] == "v" and name[1:].isdigit() else None


# ---- vLLM ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class VllmSyncConfig:
    """One `vllm serve` started with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls LegoWeightReloader."""

    base_url: str
    """e.g. http://10.0.0.6:8000 (no trailing path)."""
    timeout_s: float = 600.0
    """Per call; also sent as collective_rpc's own timeout so the workers give up when we do."""
    reset_prefix_cache: bool = True
    """Drop KV blocks computed with the old weights (POST /reset_prefix_cache, dev mode)."""


@dataclass(kw_only=True, slots=True)
class VllmWeightSync:
    """POST /collective_rpc → LegoWeightReloader.lego_load_weights_from_dir(path, version) on every worker.

    vLLM's OpenAI server has no stock weight-update endpoint; with VLLM_SERVER_DEV_MODE=1 it
    serves /collective_rpc (vllm/entrypoints/serve/dev/rpc/api_router.py; in older releases
    vllm/entrypoints/openai/api_server.py): body {"method", "args": [str], "kwargs": {str: str},
    "timeout"}, reply {"results": [one per worker]} (dicts as JSON), a worker exception
    surfaces as HTTP 500. /reset_prefix_cache is a dev endpoint of the same server.
    """

    config: VllmSyncConfig
    last_version: int | None = None

    def publish(self, version: int, weights: Weights) -> None:
        url = self.config.base_url
        _refuse_stale(url, version, self.last_version)
        path = _weights_dir(url, version, weights)
        results = self._rpc(LOAD_METHOD, [str(path), str(version)], version)
        wrong = [r for r in results if not isinstance(r, dict) or r.get("version") != version]
        if wrong:
            raise WeightSyncError(server_url=url + "/collective_rpc", version=version, status=200,
                                  message=f"{len(wrong)} of {len(results)} workers did not load it: {wrong[:2]}")
        if self.config.reset_prefix_cache:
            _call(url, "/reset_prefix_cache", version=version, timeout_s=self.config.timeout_s, body=None)
        self.last_version = version

    def served_version(self) -> int | None:
        """The version every worker serves (None if any still serves its startup weights); disagreement is an error."""
        results = self._rpc(SERVED_METHOD, [], -1)
        versions = {r.get("version") if isinstance(r, dict) else r for r in results}
        if len(versions) != 1:
            raise WeightSyncError(server_url=self.config.base_url + "/collective_rpc", version=-1, status=200,
                                  message=f"workers disagree on the served version: {sorted(map(str, versions))}")
        (only,) = versions
        return only if isinstance(only, int) else None

    def _rpc(self, method: str, args: list[str], version: int) -> list[Any]:
        reply = _call(self.config.base_url, "/collective_rpc", version=version, timeout_s=self.config.timeout_s,
                      body={"method": method, "args": args, "kwargs": {}, "timeout": self.config.timeout_s})
        if not isinstance(reply, dict) or not isinstance(reply.get("results"), list) or not reply["results"]:
            raise WeightSyncError(server_url=self.config.base_url + "/collective_rpc", version=version, status=200,
                                  message=f"expected {{'results': [one per worker]}}, got {reply!r}")
        return reply["results"]


# ---- the embedded engine's ZeroMQ server ----------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineServerSyncConfig:
    """One `python -m lego_rl.engine` server (or the EngineServerActor); it must see the weights folder at the same path."""

    address: str
    """Address the server bound, e.g. tcp://10.0.0.7:5556 or unix:///run/engine.sock (its "listening" line prints it)."""
    timeout_s: float = 600.0
    """How long the server may take to answer; it loads between two decode steps, so this includes one step."""


@dataclass(kw_only=True, slots=True)
class EngineServerWeightSync:
    """Sends UpdateWeights {request_id, version, path} and waits for WeightsUpdated with the same version.

    The server (lego_rl/engine/server.py) reads and checks the whole folder before it touches a
    parameter, loads it between two steps (requests in flight continue; tokens sampled afterwards
    carry the new version) and answers WeightsUpdated, or Error `weight_update` (stale version,
    missing or unfit folder) while it keeps serving the weights it had.
    """

    config: EngineServerSyncConfig
    last_version: int | None = None

    def publish(self, version: int, weights: Weights) -> None:
        address = self.config.address
        _refuse_stale(address, version, self.last_version)
        path = _weights_dir(address, version, weights)
        request_id = f"weights-v{version}-{uuid.uuid4().hex[:12]}"
        reply = self._ask(UpdateWeights(request_id=request_id, version=version, path=str(path)), version, request_id)
        if isinstance(reply, Error):
            raise WeightSyncError(server_url=address, version=version, message=f"{reply.code}: {reply.message}")
        if not isinstance(reply, WeightsUpdated) or reply.version != version:
            raise WeightSyncError(server_url=address, version=version, message=f"expected weights_updated for v{version}, got {reply!r}")
        self.last_version = version

    def served_version(self) -> int:
        """The policy version the server has live (EngineInfo.policy_version)."""
        reply = self._ask(EngineHello(client_id="lego-weight-sync", schema_version=SCHEMA_VERSION), -1, None)
        if not isinstance(reply, EngineInfo):
            raise WeightSyncError(server_url=self.config.address, version=-1, message=f"expected engine_info, got {reply!r}")
        return reply.policy_version

    def _ask(self, message: Any, version: int, request_id: str | None) -> Any:
        """Send one frame on a fresh connection and return the reply naming `request_id` (None: the first reply without one)."""
        address = self.config.address
        try:
            connection = ClientConnection(address)
        except (ConnectionError, ValueError) as error:
            raise WeightSyncError(server_url=address, version=version, message=str(error)) from error
        try:
            connection.send(encode_control(message))
            deadline = time.monotonic() + self.config.timeout_s
            while True:
                left_ms = int((deadline - time.monotonic()) * 1000)
                try:
                    frame = connection.recv(left_ms) if left_ms > 0 else None
                except ConnectionError as error:
                    raise WeightSyncError(server_url=address, version=version, message=f"{error} before answering {message.KIND}") from error
                if frame is None:
                    raise WeightSyncError(server_url=address, version=version,
                                          message=f"no reply to {message.KIND} within {self.config.timeout_s:g} s; is the engine server running?")
                try:
                    reply = decode_control(frame)
                except ControlMessageError as error:
                    raise WeightSyncError(server_url=address, version=version, message=f"unreadable reply: {error}") from error
                if getattr(reply, "request_id", None) == request_id:
                    return reply
        finally:
            connection.close()
