"""The engine server under change: weight updates over ZeroMQ (schema 1.2) and a step that raises.

Real ROUTER server on a thread, real DEALER clients, the tiny byte-tokenizer model. Each test
gets its own server, since updates move its policy version.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from lego_rl.weights import DiskPublishConfig, DiskWeightPublisher
from lego_rl.engine import Engine, EngineConfig, GenerationRequest, SamplingParams, TokenEvent
from lego_rl.engine.server import EngineServer, EngineServerConfig
from lego_rl.model import MoeForCausalLM, load_model
from lego_rl.model.tiny import write_tiny_model
from lego_rl.schema.generated import (
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

from .server_support import Client, serving

ENGINE = EngineConfig(max_context=4096)  # room for a request that would run for seconds un-aborted
PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-bytes", tokenizer="bytes", seed=0)


@pytest.fixture(scope="module")
def v1_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    """Other weights, published as the trainer does: per-expert layout, weight_version.json declaring 1."""
    other = load_model(write_tiny_model(tmp_path_factory.mktemp("other") / "tiny", tokenizer="bytes", seed=1))
    root = tmp_path_factory.mktemp("weights")
    DiskWeightPublisher(config=DiskPublishConfig(root=root, model_dir=model_dir)).publish(1, other)
    return root / "v1"


@pytest.fixture(scope="module")
def fused_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Other weights in the fused expert layout, no manifest (any HF folder of this architecture)."""
    return write_tiny_model(tmp_path_factory.mktemp("fused") / "tiny", tokenizer="bytes", seed=2)


def serve(model_dir: Path, engine: EngineConfig = ENGINE, policy_version: int = 0) -> Iterator[EngineServer]:
    with serving(EngineServerConfig(model_dir=str(model_dir), bind="tcp://127.0.0.1:*", engine=engine,
                                    policy_version=policy_version)) as served:
        yield served


@pytest.fixture
def server(model_dir: Path) -> Iterator[EngineServer]:
    yield from serve(model_dir)


@pytest.fixture
def clients(server: EngineServer) -> Iterator[tuple[Client, Client]]:
    """A rollout client and a trainer client (the one that sends updates)."""
    pair = Client(server.address), Client(server.address)
    yield pair
    for c in pair:
        c.close()


def generate(rid: str, prompt: list[int], max_tokens: int) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid, model=None, policy_version=None, prompt_token_ids=np.array(prompt, dtype=np.int32),
        temperature=0.0, top_p=1.0, max_tokens=max_tokens, stop_token_ids=np.array([], dtype=np.int32), seed=None, stream=True,
    )


def engine_request(rid: str, prompt: list[int], max_tokens: int) -> GenerationRequest:
    return GenerationRequest(request_id=rid, prompt_token_ids=tuple(prompt), sampling=SamplingParams(temperature=0, max_tokens=max_tokens))


def params(folder: Path) -> dict[str, torch.Tensor]:
    return dict(load_model(folder).named_parameters())


def recomputed_logprobs(model: MoeForCausalLM, prompt: list[int], completion: list[int]) -> np.ndarray:
    """Raw logprobs of the completion from one full forward of `model` over prompt + completion."""
    ids = torch.tensor([*prompt, *completion])
    with torch.no_grad():
        logits = model(ids).logits
    return torch.log_softmax(logits.float(), -1)[len(prompt) - 1 : -1].gather(1, ids[len(prompt):, None])[:, 0].numpy()


def reference(model_dir: Path, prompt: list[int], n_tokens: int, *, update_after: int | None = None,
              weights: dict[str, torch.Tensor] | None = None) -> tuple[list[int], np.ndarray, list[int]]:
    """The in-process engine alone: greedy tokens, logprobs and versions, updating after `update_after` tokens."""
    engine = Engine.from_model_dir(model_dir, ENGINE)
    engine.submit(engine_request("ref", prompt, n_tokens))
    events: list[TokenEvent] = []
    while engine.has_work:
        if update_after is not None and len(events) == update_after:
            assert weights is not None
            engine.update_weights(weights, 1)
        events += [e for e in engine.step() if isinstance(e, TokenEvent)]
    assert len(events) == n_tokens
    return [e.token_id for e in events], np.array([e.logprob for e in events], dtype=np.float32), [e.policy_version for e in events]


# ---- weight updates -------------------------------------------------------------------


def test_an_update_lands_between_steps_of_a_running_request_and_later_tokens_carry_the_new_version(
    model_dir: Path, v1_dir: Path, server: EngineServer, clients: tuple[Client, Client]
):
    rollout, trainer = clients
    rollout.send(generate("long", PROMPT, max_tokens=4000))
    chunks = [rollout.recv() for _ in range(3)]
    assert trainer.ask(UpdateWeights(request_id="u1", version=1, path=str(v1_dir))) == WeightsUpdated(request_id="u1", version=1)
    while sum(c.policy_version == 1 for c in chunks) < 4:
        chunks.append(rollout.recv())
    rollout.send(Abort(request_id="long"))
    more, result = rollout.until_result("long")
    chunks += more
    versions = [c.policy_version for c in chunks]
    switch = versions.index(1)
    assert switch >= 3 and versions == [0] * switch + [1] * (len(versions) - switch)  # one switch, never back
    assert result.finish_reason == "abort" and result.policy_version == 0  # the oldest version that sampled a token
    tokens = result.completion_token_ids.tolist()
    assert tokens == [int(t) for c in chunks for t in c.token_ids]

    # The in-process engine updated after the same number of tokens gives the same tokens and logprobs:
    # old-weight tokens as v0 computed them, new-weight tokens from v1 over the caches already built.
    want_tokens, want_logprobs, want_versions = reference(model_dir, PROMPT, len(tokens), update_after=switch, weights=params(v1_dir))
    assert tokens == want_tokens and versions == want_versions
    np.testing.assert_allclose(result.logprobs, want_logprobs, rtol=0, atol=1e-5)
    # ... which is not what v0 would have gone on to give: the update took effect.
    _, v0_logprobs, _ = reference(model_dir, PROMPT, switch + 1)
    assert abs(float(v0_logprobs[switch]) - float(result.logprobs[switch])) > 1e-3

    # A request started after the update is v1 throughout, and equals v1's own full recompute.
    rollout.send(generate("fresh", PROMPT, max_tokens=8))
    fresh_chunks, fresh = rollout.until_result("fresh")
    assert {c.policy_version for c in fresh_chunks} == {1} and fresh.policy_version == 1
    v1 = load_model(v1_dir).eval()
    np.testing.assert_allclose(fresh.logprobs, recomputed_logprobs(v1, PROMPT, fresh.completion_token_ids.tolist()), rtol=0, atol=1e-5)
    info = trainer.ask(EngineHello(client_id="trainer", schema_version=SCHEMA_VERSION))
    assert isinstance(info, EngineInfo) and info.policy_version == 1
    assert server.stats["weight_updates"] == 1


def test_the_fused_expert_layout_without_a_manifest_loads_too(fused_dir: Path, server: EngineServer, clients: tuple[Client, Client]):
    rollout, trainer = clients
    assert trainer.ask(UpdateWeights(request_id="f", version=5, path=str(fused_dir))) == WeightsUpdated(request_id="f", version=5)
    rollout.send(generate("after", PROMPT, max_tokens=6))
    _, result = rollout.until_result("after")
    assert result.policy_version == 5
    fused = load_model(fused_dir).eval()
    np.testing.assert_allclose(result.logprobs, recomputed_logprobs(fused, PROMPT, result.completion_token_ids.tolist()), rtol=0, atol=1e-5)


def test_a_version_that_does_not_increase_is_refused_and_the_server_keeps_serving(model_dir: Path, v1_dir: Path):
    for served in serve(model_dir, policy_version=3):
        c = Client(served.address)
        try:
            for stale in (3, 1):
                error = c.ask(UpdateWeights(request_id=f"stale-{stale}", version=stale, path=str(v1_dir)))
                assert isinstance(error, Error), error
                assert (error.code, error.request_id, error.field) == ("weight_update", f"stale-{stale}", "version")
                assert "must increase" in error.message and "3" in error.message
            c.send(generate("still", PROMPT, max_tokens=4))
            chunks, result = c.until_result("still")
            assert result.policy_version == 3 and {ch.policy_version for ch in chunks} == {3}
            assert served.stats["weight_updates"] == 0
        finally:
            c.close()


def _missing_tensor(folder: Path, tmp: Path) -> Path:
    out = tmp / "missing-tensor"
    shutil.copytree(folder, out)
    tensors = load_file(out / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, str(out / "model.safetensors"))
    return out


def _wrong_shape_last(folder: Path, tmp: Path) -> Path:
    # Every other tensor fits: an update that copied as it checked would stop half way, with mixed weights.
    out = tmp / "wrong-shape"
    shutil.copytree(folder, out)
    (out / "config.json").unlink()
    tensors = load_file(out / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(7)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def _other_architecture(folder: Path, tmp: Path) -> Path:
    out = tmp / "other-architecture"
    shutil.copytree(folder, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "rope_theta": 1.0, "rope_parameters": {"rope_type": "default", "rope_theta": 1.0}}))
    return out


def _manifest_says_another_version(folder: Path, tmp: Path) -> Path:
    out = tmp / "manifest"
    shutil.copytree(folder, out)
    (out / "weight_version.json").write_text(json.dumps({"version": 9, "published_at_ms": 0.0, "checkpoint_path": None}))
    return out


def _no_safetensors(folder: Path, tmp: Path) -> Path:
    out = tmp / "empty"
    out.mkdir()
    shutil.copyfile(folder / "config.json", out / "config.json")
    return out


def _not_safetensors(folder: Path, tmp: Path) -> Path:
    out = tmp / "garbage"
    shutil.copytree(folder, out)
    (out / "model.safetensors").write_bytes(b"\x00" * 64)
    return out


BAD_FOLDERS = {
    "a folder that does not exist": (lambda folder, tmp: tmp / "nowhere", "not a directory"),
    "a missing tensor": (_missing_tensor, "model.norm.weight"),
    "a tensor of the wrong shape": (_wrong_shape_last, "shape"),
    "another architecture": (_other_architecture, "rope_theta"),
    "a manifest declaring another version": (_manifest_says_another_version, "declares version 9"),
    "no safetensors": (_no_safetensors, "no *.safetensors"),
    "a corrupt safetensors file": (_not_safetensors, "safetensors"),
}


@pytest.mark.parametrize("name", list(BAD_FOLDERS))
def test_a_bad_folder_is_refused_and_the_old_weights_keep_serving(model_dir: Path, v1_dir: Path, server: EngineServer,
                                                                 clients: tuple[Client, Client], tmp_path: Path, name: str):
    rollout, trainer = clients
    make, words = BAD_FOLDERS[name]
    rollout.send(generate("during", PROMPT, max_tokens=40))
    error = trainer.ask(UpdateWeights(request_id="bad", version=1, path=str(make(v1_dir, tmp_path))))
    assert isinstance(error, Error), error
    assert (error.code, error.request_id, error.field) == ("weight_update", "bad", "path")
    assert words in error.message, error.message
    # Nothing of the folder was loaded: the request running meanwhile and a new one are pure v0.
    _, during = rollout.until_result("during")
    rollout.send(generate("after", PROMPT, max_tokens=40))
    _, after = rollout.until_result("after")
    want_tokens, want_logprobs, _ = reference(model_dir, PROMPT, 40)
    for result in (during, after):
        assert result.policy_version == 0 and result.completion_token_ids.tolist() == want_tokens
        np.testing.assert_allclose(result.logprobs, want_logprobs, rtol=0, atol=1e-5)
    # And the next good update still goes through.
    assert trainer.ask(UpdateWeights(request_id="good", version=1, path=str(v1_dir))) == WeightsUpdated(request_id="good", version=1)


@pytest.mark.parametrize("policy", ["continue", "drain"])
def test_a_weight_update_during_sixteen_in_flight_requests_loses_none_of_them(model_dir: Path, v1_dir: Path, policy: str):
    """`continue`: the update lands at once and the 16 finish under v1; `drain`: they finish on v0 first,
    the update waits for them, and requests sent after it wait for the update."""
    for served in serve_with(model_dir, policy):
        c = Client(served.address)
        try:
            n_tokens = 200
            for i in range(16):
                c.send(generate(f"r{i}", [1 + i, 2, 3], max_tokens=n_tokens))
            streamed: dict[str, list[TokenChunk]] = {f"r{i}": [] for i in range(16)}
            while not all(streamed.values()):  # all sixteen are running
                chunk = c.recv()
                assert isinstance(chunk, TokenChunk), chunk
                streamed[chunk.request_id].append(chunk)
            # One socket, so the engine reads the update before the requests sent after it.
            c.send(UpdateWeights(request_id="u", version=1, path=str(v1_dir)))
            for i in range(4):
                c.send(generate(f"after{i}", [9, 8, 7 + i], max_tokens=5))
                streamed[f"after{i}"] = []
            results: dict[str, GenerateResult] = {}
            order: list[str] = []
            while len(results) < 20 or "updated" not in order:
                message = c.recv()
                if isinstance(message, WeightsUpdated):
                    assert message == WeightsUpdated(request_id="u", version=1)
                    order.append("updated")
                elif isinstance(message, GenerateResult):
                    results[message.request_id] = message
                    order.append(message.request_id)
                else:
                    assert isinstance(message, TokenChunk), message
                    streamed[message.request_id].append(message)
                    if message.request_id.startswith("after"):
                        order.append("after-token")
            for rid, result in results.items():
                chunks = streamed[rid]
                assert result.finish_reason == "length"
                assert result.completion_token_ids.tolist() == [int(t) for ch in chunks for t in ch.token_ids]
                # Every token of the result says which version sampled it, as its chunk did.
                assert result.policy_versions.tolist() == [ch.policy_version for ch in chunks]
            originals = [results[f"r{i}"].policy_versions.tolist() for i in range(16)]
            assert all(len(v) == n_tokens for v in originals)
            assert all(results[f"after{i}"].policy_versions.tolist() == [1] * 5 for i in range(4))
            if policy == "continue":
                assert all(v == sorted(v) and v[0] == 0 for v in originals)  # at most one switch, v0 to v1
                assert all(v[-1] == 1 for v in originals)  # the update landed while they ran
            else:
                assert all(v == [0] * n_tokens for v in originals)  # finished on the weights they started with
                updated = order.index("updated")
                assert set(order[:updated]) == {f"r{i}" for i in range(16)}  # the update waited for all of them
                assert "after-token" not in order[:updated]  # and the queue waited for the update
            assert served.stats["weight_updates"] == 1
        finally:
            c.close()


def serve_with(model_dir: Path, policy: str) -> Iterator[EngineServer]:
    with serving(EngineServerConfig(model_dir=str(model_dir), bind="tcp://127.0.0.1:*", engine=ENGINE,
                                    weight_update_policy=policy)) as served:  # type: ignore[arg-type]
        yield served


def test_while_an_update_waits_for_running_requests_a_second_one_is_refused(model_dir: Path, v1_dir: Path, fused_dir: Path):
    for served in serve_with(model_dir, "drain"):
        c = Client(served.address)
        try:
            c.send(generate("running", PROMPT, max_tokens=4000))
            assert isinstance(c.recv(), TokenChunk)
            c.send(UpdateWeights(request_id="first", version=1, path=str(v1_dir)))
            c.send(UpdateWeights(request_id="second", version=2, path=str(fused_dir)))
            while not isinstance(message := c.recv(), Error):
                assert isinstance(message, TokenChunk), message
            assert (message.code, message.request_id, message.field) == ("weight_update", "second", "version")
            assert "waiting for 1 running requests" in message.message
            c.send(Abort(request_id="running"))
            _, aborted = c.until_result("running")
            assert aborted.finish_reason == "abort" and set(aborted.policy_versions.tolist()) == {0}
            assert c.recv() == WeightsUpdated(request_id="first", version=1)
        finally:
            c.close()


# ---- a step that raises -------------------------------------------------------------


class FailOnce:
    """Wraps the model's forward; once armed, the next call raises (on the serving thread)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.forward = model.forward
        self.armed = threading.Event()
        self.fired = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed.is_set() and not self.fired.is_set():
            self.fired.set()
            raise RuntimeError("injected failure in the forward pass")
        return self.forward(*args, **kwargs)


def test_a_failing_step_fails_its_requests_with_an_error_and_the_server_serves_on(model_dir: Path):
    for served in serve(model_dir, EngineConfig(max_context=4096, max_running=2)):
        model = served.engine.model
        failure = FailOnce(model)
        model.forward = failure  # an instance attribute: nn.Module.__call__ runs it
        c = Client(served.address)
        try:
            c.send(generate("a", PROMPT, max_tokens=4000))
            c.send(generate("b", [5, 6, 7, 8], max_tokens=4000))
            c.send(generate("queued", [9, 10], max_tokens=5))  # waits: a and b fill max_running
            seen: set[str] = set()
            while seen != {"a", "b"}:
                message = c.recv()
                assert isinstance(message, TokenChunk), message
                seen.add(message.request_id)
            failure.armed.set()
            errors: dict[str, Error] = {}
            queued: list[int] = []
            while True:
                message = c.recv()
                if isinstance(message, Error):
                    errors[message.request_id] = message
                elif isinstance(message, GenerateResult):
                    break
                else:
                    assert isinstance(message, TokenChunk)
                    if message.request_id == "queued":
                        queued += message.token_ids.tolist()
                    else:  # a chunk of a or b sampled before the failing step, never one after its error
                        assert message.request_id not in errors, message
            assert failure.fired.is_set()
            assert sorted(errors) == ["a", "b"]
            for rid, error in errors.items():
                assert (error.code, error.field) == ("engine_failure", None)
                assert "RuntimeError: injected failure in the forward pass" in error.message and repr(rid) in error.message
            # The queued request ran after the failure, as it would have alone.
            assert message.request_id == "queued" and message.finish_reason == "length"
            want_tokens, want_logprobs, _ = reference(model_dir, [9, 10], 5)
            assert message.completion_token_ids.tolist() == queued == want_tokens
            np.testing.assert_allclose(message.logprobs, want_logprobs, rtol=0, atol=1e-5)
            # The failed requests are gone from the engine, and new ones are served.
            c.send(Abort(request_id="a"))
            gone = c.recv()
            assert isinstance(gone, Error) and (gone.code, gone.request_id) == ("unknown_request", "a")
            c.send(generate("new", PROMPT, max_tokens=6))
            _, new = c.until_result("new")
            want_tokens, want_logprobs, _ = reference(model_dir, PROMPT, 6)
            assert new.completion_token_ids.tolist() == want_tokens
            np.testing.assert_allclose(new.logprobs, want_logprobs, rtol=0, atol=1e-5)
            assert c.ask(EngineHello(client_id="t", schema_version=SCHEMA_VERSION)).active_requests == 0
            assert served.stats["step_failures"] == 1
        finally:
            c.close()
