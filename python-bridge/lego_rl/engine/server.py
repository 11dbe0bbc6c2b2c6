"""The engine over ZeroMQ (a ROUTER socket) or a Unix socket (wire.py), in front of one `Engine` (frames from schemas/records.toml).

1. One thread owns the socket and the engine. Each turn of the loop reads every frame
   already queued (without blocking while the engine has work), then runs one
   `Engine.step()`; so requests from any number of DEALER clients join the same
   continuous batch between decode steps.
2. Every ZeroMQ message is one msgpack control frame (docs/model.md "Serving over ZeroMQ"). A
   client sends EngineHello, GenerateRequest or Abort; the server answers EngineInfo,
   TokenChunk per sampled token (when `stream`) and one GenerateResult per request;
   a request that asks for `final_tokens_in_result` (schema 2.4) gets no chunk for the
   step that ends it: those tokens come in its result, one frame less per request.
3. Bad input never stops the server: an undecodable frame, a message of the wrong
   kind, an unknown model name or policy version, and every `InvalidRequestError`
   become an Error reply (code, message, request_id, field) and the loop goes on.
4. Request ids are scoped per client: the engine sees `<peer hex>/<request_id>`, so two
   clients may reuse an id; replies carry the client's own id.
5. UpdateWeights (schema 1.2) loads a weights folder on the serving thread, so between two
   steps. The folder is read and checked in full (version above the live one, manifest,
   config, tensor names and shapes) before one parameter is touched, so a refused update
   (Error weight_update) leaves the old weights serving intact. What happens to requests
   in flight is `weight_update_policy`: `continue` loads at once and they go on under the
   new weights (each token says which version sampled it); `drain` admits nothing new,
   lets every running request finish on the old weights, then loads and admits the queue,
   so each request is sampled by one version. No request is dropped either way.
6. An exception inside `Engine.step()` fails only the requests of that step: each gets an
   Error engine_failure and is aborted in the engine (its partly written caches go with
   it); queued requests stay queued and the loop goes on.
7. Stopping (SIGTERM) drains: new generate requests get Error shutting_down, the running
   and queued ones get `drain_timeout_s` to finish, and whatever is left then is failed
   with Error shutting_down, so no client waits for a reply that never comes.
8. The wire is the bind address's (wire.py): ZeroMQ (`tcp://`, `ipc://`) or a Unix socket
   (`unix:///PATH`, length-prefixed frames) for a proxy on the same host. A Unix-socket client
   that disconnects has its requests aborted at once; ZeroMQ cannot tell, so they run out.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgpack
import numpy as np
import torch
import zmq
from safetensors import SafetensorError
from safetensors.torch import load_file

from lego_rl.schema import ControlMessageError, decode_control, encode_control
from lego_rl.schema import (
    SCHEMA_MAJOR,
    SCHEMA_VERSION,
    Abort,
    EngineHello,
    EngineInfo,
    Error,
    GenerateRequest,
    GenerateResult,
    TokenChunk,
    UpdateWeights,
    WeightsUpdated,
)
from lego_rl.model import CheckpointError, ConfigError, read_config, safetensors_files

from .engine import Engine, EngineConfig
from .wire import open_wire
from .types import (
    GenerationRequest,
    GenerationResult,
    InvalidRequestError,
    SamplingParams,
    TokenEvent,
    UnknownRequestError,
    WeightUpdateError,
)

# The control codec carries integers exactly only within +-2^53 (JavaScript numbers), so a
# seed the server draws for a request that gave none stays below that; the engine's own
# draw goes up to 2^63.
_SEED_LIMIT = 2**53
# Frames read per loop turn at most, so a flood of requests cannot starve decoding.
_MAX_FRAMES_PER_TURN = 256
# What a weights folder may declare its version in (DiskWeightPublisher writes it: the WeightVersion record as JSON).
WEIGHTS_MANIFEST = "weight_version.json"
# Config fields that do not change what the weights mean; every other one must match the served model.
_CONFIG_FIELDS_IGNORED = frozenset({"extra", "eos_token_id"})
# GenerateResult.policy_versions is array<int32>: one version per token.
_MAX_VERSION = 2**31 - 1

WeightUpdatePolicy = Literal["continue", "drain"]


@dataclass(kw_only=True, slots=True, frozen=True)
class EngineServerConfig:
    """What `python -m lego_rl.engine` and the Ray actor serve, and where."""

    model_dir: str
    """A Hugging Face style model directory (config.json + safetensors)."""
    bind: str = "tcp://127.0.0.1:5556"
    """Where to listen (wire.py): a ZeroMQ endpoint (`tcp://127.0.0.1:*` picks a free port; read it from
    `address`), or `unix:///PATH` for a proxy on the same host."""
    model_name: str | None = None
    """Name clients may ask for (GenerateRequest.model); None = the model directory's name."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Scheduling and dtype of the engine."""
    policy_version: int = 0
    """Version of the weights loaded from model_dir."""
    weight_update_policy: WeightUpdatePolicy = "continue"
    """Requests in flight at an UpdateWeights: `continue` loads at once and they finish under the new
    weights (tokens carry their version); `drain` holds new admissions, lets them finish on the old
    weights, then loads (each request sampled by one version; the update waits for the longest)."""
    drain_timeout_s: float = 30.0
    """On stop (SIGTERM): how long running and queued requests get to finish before they are failed
    with Error shutting_down."""

    def build(self, context: zmq.Context[Any] | None = None) -> EngineServer:
        engine = Engine.from_model_dir(self.model_dir, self.engine, policy_version=self.policy_version)
        engine.warm_up()  # a compiled decode compiles here, before the server listens, not in a client's request
        name = self.model_name or Path(self.model_dir).resolve().name
        return EngineServer(engine, bind=self.bind, model_name=name, context=context,
                            weight_update_policy=self.weight_update_policy, drain_timeout_s=self.drain_timeout_s)


@dataclass(kw_only=True, slots=True)
class _Pending:
    peer: bytes
    request_id: str
    """The client's id (the engine's is `<peer hex>/<request_id>`)."""
    stream: bool
    final_in_result: bool
    """Streaming, and the step that ends the request sends its tokens in the result only."""


@dataclass(kw_only=True, slots=True)
class _HeldUpdate:
    """An UpdateWeights read and checked, waiting for the running requests to finish (policy `drain`)."""

    peer: bytes
    update: UpdateWeights
    tensors: dict[str, torch.Tensor]


class EngineServer:
    """Serves one Engine on a bound wire (a ZeroMQ ROUTER or a Unix socket, wire.py); call `serve(stop)` from one thread."""

    def __init__(self, engine: Engine, *, bind: str, model_name: str, context: zmq.Context[Any] | None = None,
                 weight_update_policy: WeightUpdatePolicy = "continue", drain_timeout_s: float = 30.0) -> None:
        if weight_update_policy not in ("continue", "drain"):
            raise ValueError(f"weight_update_policy must be 'continue' or 'drain', got {weight_update_policy!r}")
        self.engine = engine
        self.model_name = model_name
        self.weight_update_policy = weight_update_policy
        self.drain_timeout_s = drain_timeout_s
        self.draining = False
        """Set once stopping: new requests are refused while the accepted ones finish."""
        self._held: _HeldUpdate | None = None
        self._wire = open_wire(bind, context)
        self._pending: dict[str, _Pending] = {}
        self._seeds = random.Random()
        self.stats: dict[str, int] = {"requests": 0, "results": 0, "errors": 0, "aborts": 0, "weight_updates": 0, "step_failures": 0}

    @property
    def address(self) -> str:
        """The bound endpoint with the real port (bind `tcp://127.0.0.1:*` for an ephemeral one)."""
        return self._wire.address

    def serve(self, stop: threading.Event | None = None, idle_poll_ms: int = 50) -> None:
        """Runs until `stop` is set (checked every `idle_poll_ms` while idle) or the socket closes, then drains."""
        while not (stop is not None and stop.is_set()) and not self._wire.closed:
            self.serve_once(idle_poll_ms)
        if not self._wire.closed:
            self.drain()

    def drain(self) -> None:
        """Refuse new requests, give the accepted ones `drain_timeout_s` to finish, fail the rest with Error shutting_down."""
        self.draining = True
        self.engine.admitting = True  # a held update is refused below; the queue may run meanwhile
        if self._held is not None:
            held, self._held = self._held, None
            self._error(held.peer, "shutting_down", f"update {held.update.request_id!r} to v{held.update.version}: the engine is shutting down",
                        request_id=held.update.request_id)
        deadline = time.monotonic() + self.drain_timeout_s
        while self.engine.has_work and time.monotonic() < deadline and not self._wire.closed:
            self.serve_once(0)
        for key in list(self._pending):
            try:
                self.engine.abort(key)
            except UnknownRequestError:
                pass  # already retired by a failed step
            pending = self._pending.pop(key)
            self._error(pending.peer, "shutting_down",
                        f"request {pending.request_id!r}: the engine is shutting down and it did not finish within {self.drain_timeout_s} s",
                        request_id=pending.request_id)

    def serve_once(self, idle_poll_ms: int = 50) -> None:
        """Reads the frames that are waiting (blocking up to `idle_poll_ms` only when idle), then steps once."""
        wait = 0 if self.engine.has_work else idle_poll_ms
        for _ in range(_MAX_FRAMES_PER_TURN):
            if not self._wire.poll(wait):
                break
            self._handle(*self._wire.recv())
            wait = 0
        for peer in self._wire.take_gone():
            self._forget(peer)
        self._apply_held_update()
        if self.engine.has_work:
            try:
                events = self.engine.step()
            except Exception as error:  # noqa: BLE001 - any failure of a step fails its requests, never the server
                self._fail_step(error)
                return
            ending = {e.request_id for e in events if isinstance(e, GenerationResult)}
            for event in events:
                self._dispatch(event, ending)
            self._apply_held_update()

    def close(self) -> None:
        self._wire.close()

    # ------------------------------------------------------------ requests in

    def _handle(self, peer: bytes, body: Any) -> None:
        if body is None:
            self._error(peer, "bad_frame", "expected one control frame per message")
            return
        try:
            message = decode_control(body)
        except ControlMessageError as error:
            self._error(peer, "bad_frame", str(error), request_id=_salvage_request_id(body))
            return
        if isinstance(message, GenerateRequest):
            self._generate(peer, message)
        elif isinstance(message, Abort):
            self._abort(peer, message.request_id)
        elif isinstance(message, EngineHello):
            self._hello(peer, message)
        elif isinstance(message, UpdateWeights):
            self._update_weights(peer, message)
        else:
            self._error(peer, "unexpected_message",
                        f"an engine handles engine_hello, generate, abort and update_weights, not {type(message).KIND}")

    def _hello(self, peer: bytes, hello: EngineHello) -> None:
        major = hello.schema_version.split(".")[0]
        if major != str(SCHEMA_MAJOR):
            self._error(peer, "schema_version", f"client {hello.client_id!r} speaks schema {hello.schema_version}; this engine speaks {SCHEMA_VERSION}")
            return
        config = self.engine.model.config
        self._send(peer, EngineInfo(
            model=self.model_name,
            policy_version=self.engine.policy_version,
            vocab_size=config.vocab_size,
            max_context=self.engine.max_context,
            moe_layers=len(config.moe_layers),
            top_k=config.num_experts_per_tok,
            num_experts=config.num_experts,
            active_requests=len(self._pending),
            schema_version=SCHEMA_VERSION,
        ))

    def _generate(self, peer: bytes, req: GenerateRequest) -> None:
        rid = req.request_id
        if self.draining:
            self._error(peer, "shutting_down", f"request {rid!r}: the engine is shutting down and takes no new requests", request_id=rid)
            return
        if req.model is not None and req.model != self.model_name:
            self._error(peer, "unknown_model", f"request {rid!r} asks for model {req.model!r}; this engine serves {self.model_name!r}", request_id=rid, bad_field="model")
            return
        if req.policy_version is not None and req.policy_version != self.engine.policy_version:
            self._error(
                peer, "policy_version",
                f"request {rid!r} expects policy version {req.policy_version}; this engine serves version {self.engine.policy_version}",
                request_id=rid, bad_field="policy_version",
            )
            return
        key = f"{peer.hex()}/{rid}"
        seed = req.seed if req.seed is not None else self._seeds.randrange(_SEED_LIMIT)
        request = GenerationRequest(
            request_id=key,
            prompt_token_ids=tuple(req.prompt_token_ids.tolist()),
            sampling=SamplingParams(
                temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens,
                stop_token_ids=tuple(req.stop_token_ids.tolist()), seed=seed,
            ),
        )
        try:
            self.engine.submit(request)
        except InvalidRequestError as error:
            # The engine's message names the scoped key; the client knows its own id.
            self._error(peer, "invalid_request", str(error).replace(repr(key), repr(rid)), request_id=rid, bad_field=error.field)
            return
        self._pending[key] = _Pending(peer=peer, request_id=rid, stream=req.stream, final_in_result=req.stream and req.final_tokens_in_result is True)
        self.stats["requests"] += 1

    def _abort(self, peer: bytes, rid: str) -> None:
        key = f"{peer.hex()}/{rid}"
        try:
            result = self.engine.abort(key)
        except UnknownRequestError:
            # Usually a race: the request ended (its result is on the way) as the client aborted.
            self._error(peer, "unknown_request", f"no request {rid!r} of this client is queued or running", request_id=rid, bad_field="request_id")
            return
        self.stats["aborts"] += 1
        self._dispatch(result)

    def _forget(self, peer: bytes) -> None:
        """A client that disconnected (a Unix-socket wire says so): its requests stop now, nobody reads them."""
        for key in [k for k, p in self._pending.items() if p.peer == peer]:
            del self._pending[key]
            try:
                self.engine.abort(key)
                self.stats["aborts"] += 1
            except UnknownRequestError:
                pass  # retired by a failed step meanwhile

    def _update_weights(self, peer: bytes, update: UpdateWeights) -> None:
        rid, version, live = update.request_id, update.version, self.engine.policy_version
        refusal = None
        if version <= live:
            refusal = f"policy version must increase: this engine serves {live}, got {version}"
        elif version > _MAX_VERSION:
            refusal = f"version {version} is above {_MAX_VERSION}, the largest a per-token version (int32) holds"
        elif self._held is not None:
            refusal = (f"the update to v{self._held.update.version} is still waiting for {self.engine.num_running} running "
                       "requests to finish; send the next one after its weights_updated")
        elif self.draining:
            refusal = "the engine is shutting down"
        if refusal is not None:
            self._error(peer, "weight_update", f"update {rid!r}: {refusal}", request_id=rid, bad_field="version")
            return
        try:
            tensors = read_weights_dir(update.path, self.engine.model, version)
        except Exception as error:  # noqa: BLE001 - nothing is loaded yet: any failure to read the folder is a refusal
            detail = str(error) if isinstance(error, WeightUpdateError) else f"{update.path}: {type(error).__name__}: {error}"
            self._error(peer, "weight_update", f"update {rid!r} to v{version}: {detail}", request_id=rid, bad_field="path")
            return
        self._held = _HeldUpdate(peer=peer, update=update, tensors=tensors)
        if self.weight_update_policy == "drain":
            self.engine.admitting = False  # the queue waits; the running requests finish on the old weights
        self._apply_held_update()

    def _apply_held_update(self) -> None:
        """Load the update read last, once no running request holds it back (policy `drain`), and say so."""
        held = self._held
        if held is None or (self.weight_update_policy == "drain" and self.engine.num_running > 0):
            return
        self._held = None
        self.engine.admitting = True
        rid, version = held.update.request_id, held.update.version
        try:
            self.engine.update_weights(held.tensors, version, source=held.update.path)
        except WeightUpdateError as error:  # tensors that do not fit the served model; nothing was copied
            self._error(held.peer, "weight_update", f"update {rid!r} to v{version}: {error}", request_id=rid, bad_field="path")
            return
        self.stats["weight_updates"] += 1
        self._send(held.peer, WeightsUpdated(request_id=rid, version=self.engine.policy_version))

    # ------------------------------------------------------------ failures

    def _fail_step(self, error: Exception) -> None:
        """Error engine_failure to every request the failed step held, each aborted in the engine; the queue stays."""
        self.stats["step_failures"] += 1
        traceback.print_exception(error, file=sys.stderr)
        text = f"engine step failed: {type(error).__name__}: {error}"
        queued = set(self.engine.queued_request_ids)
        for key in [k for k in self._pending if k not in queued]:
            try:
                self.engine.abort(key)
            except UnknownRequestError:
                pass  # the step had already retired it (its result was never sent)
            except Exception:  # noqa: BLE001 - the client still gets its error; the server goes on
                traceback.print_exc(file=sys.stderr)
            pending = self._pending.pop(key)
            self._error(pending.peer, "engine_failure", f"request {pending.request_id!r}: {text}", request_id=pending.request_id)

    # ------------------------------------------------------------ replies out

    def _dispatch(self, event: TokenEvent | GenerationResult, ending: set[str] | frozenset[str] = frozenset()) -> None:
        """`ending`: the requests whose result this step also sends (their last tokens may go with it)."""
        if isinstance(event, TokenEvent):
            pending = self._pending[event.request_id]
            if pending.stream and not (pending.final_in_result and event.request_id in ending):
                self._send(pending.peer, TokenChunk(
                    request_id=pending.request_id,
                    token_ids=np.array([event.token_id], dtype=np.int32),
                    logprobs=np.array([event.logprob], dtype=np.float32),
                    policy_version=event.policy_version,
                ))
            return
        pending = self._pending.pop(event.request_id)
        self.stats["results"] += 1
        self._send(pending.peer, result_message(pending.request_id, event))

    def _send(self, peer: bytes, message: Any) -> None:
        self._wire.send(peer, encode_control(message))

    def _error(self, peer: bytes, code: str, message: str, *, request_id: str | None = None, bad_field: str | None = None) -> None:
        self.stats["errors"] += 1
        self._send(peer, Error(code=code, message=message, batch_id=None, request_id=request_id, field=bad_field))


def result_message(request_id: str, result: GenerationResult) -> GenerateResult:
    """The wire form of a finished request; routing [N, L, K] int16 becomes flat uint16 (ids are >= 0)."""
    _, layers, top_k = result.prompt_routing.shape
    return GenerateResult(
        request_id=request_id,
        finish_reason=result.finish_reason,
        completion_token_ids=np.asarray(result.completion_token_ids, dtype=np.int32),
        logprobs=result.logprobs.numpy(),
        prompt_routing=result.prompt_routing.numpy().reshape(-1).astype(np.uint16),
        completion_routing=result.completion_routing.numpy().reshape(-1).astype(np.uint16),
        moe_layers=layers,
        top_k=top_k,
        policy_version=result.policy_version,
        seed=result.seed,
        policy_versions=np.asarray(result.policy_versions, dtype=np.int32),
        cached_prompt_tokens=result.cached_tokens,
    )


def read_weights_dir(path: str | Path, model: torch.nn.Module, version: int) -> dict[str, torch.Tensor]:
    """The tensors of a Hugging Face-layout weights folder; WeightUpdateError says what is wrong with it.

    Either expert layout (per expert or fused) and sharded folders (model.safetensors.index.json)
    load. A `weight_version.json` (DiskWeightPublisher's manifest) must declare `version`, and a
    `config.json` must describe the served architecture of `model`. Whether the tensors fit
    (names, shapes, dtypes) is checked by `Engine.update_weights` before it copies any.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise WeightUpdateError(f"{folder}: not a directory on the engine's machine")
    manifest = folder / WEIGHTS_MANIFEST
    if manifest.exists():
        try:
            declared = json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise WeightUpdateError(f"{manifest}: unreadable ({error})") from error
        if declared != version:
            raise WeightUpdateError(f"{manifest} declares version {declared!r}, not {version}")
    config = model.config  # type: ignore[attr-defined]
    if (folder / "config.json").exists():
        try:
            theirs = read_config(folder)
        except (CheckpointError, ConfigError, ValueError, TypeError) as error:
            raise WeightUpdateError(f"{folder / 'config.json'}: {error}") from error
        differ = [f for f in config.__dataclass_fields__ if f not in _CONFIG_FIELDS_IGNORED and getattr(theirs, f) != getattr(config, f)]
        if differ:
            detail = ", ".join(f"{f}={getattr(theirs, f)!r} (served {getattr(config, f)!r})" for f in differ[:6])
            raise WeightUpdateError(f"{folder / 'config.json'} describes another architecture: {detail}")
    tensors: dict[str, torch.Tensor] = {}
    try:
        for file in safetensors_files(folder):
            tensors.update(load_file(file))
    except CheckpointError as error:
        raise WeightUpdateError(str(error)) from error
    except (OSError, SafetensorError, ValueError) as error:
        raise WeightUpdateError(f"{folder}: cannot read the safetensors ({error})") from error
    except KeyError as error:
        raise WeightUpdateError(f"{folder}: {error.args[0]}") from error
    # Names, expert layout, shapes and dtypes are checked by Engine.update_weights
    # (checkpoint.load_state) before it copies anything.
    return tensors


def _salvage_request_id(body: Any) -> str | None:
    """The `request_id` of a frame that failed validation, if it is a readable map, so the client can fail that request."""
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (msgpack.UnpackException, ValueError, TypeError):
        return None
    rid = wire.get("request_id") if isinstance(wire, dict) else None
    return rid if isinstance(rid, str) else None
