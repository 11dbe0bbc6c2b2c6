"""Weight sync to external servers, against local fake SGLang and vLLM servers that record what they receive.

The fakes answer with the shapes of the real endpoints (see lego_rl/weights/sync.py for the
sources): SGLang's /update_weights_from_disk + /get_model_info, vLLM's dev-mode /collective_rpc
(driving the real LegoWeightReloader mixed into fake workers) + /reset_prefix_cache.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch
from safetensors.torch import load_file

from lego_rl.weights.vllm_worker_extension import LegoWeightReloader, read_manifest_version
from lego_rl.weights import (
    DiskPublishConfig,
    DiskWeightPublisher,
    EngineServerSyncConfig,
    EngineServerWeightSync,
    SglangSyncConfig,
    SglangWeightSync,
    VllmSyncConfig,
    VllmWeightSync,
    WeightSyncError,
)
from lego_rl.engine import EngineConfig
from lego_rl.engine.server import EngineServer, EngineServerConfig
from lego_rl.model import load_model
from lego_rl.model.checkpoint import split_experts
from lego_rl.model.tiny import write_tiny_model
from lego_rl.trainer.driver import LocalPolicy

from ..engine.server_support import serving


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), tokenizer="bytes", seed=0)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> torch.nn.Module:
    return load_model(model_dir)


def _changed(model: torch.nn.Module, shift: float) -> dict[str, torch.Tensor]:
    """A full state dict (as TrainerRank.weights returns it: tied lm_head listed too) with every tensor moved."""
    return {name: t.detach().clone() + shift for name, t in model.state_dict().items()}


def _assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    left, right = dict(a.named_parameters()), dict(b.named_parameters())
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), name


# ---- fake servers -------------------------------------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class FakeServer:
    """A stdlib HTTP server on 127.0.0.1:<ephemeral>; `route(method, path, body)` returns (status, reply)."""

    route: Callable[[str, str, Any], tuple[int, Any]]
    requests: list[Recorded] = field(default_factory=list)
    httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.httpd is not None
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                fake.requests.append(Recorded(self.command, self.path, body))
                status, reply = fake.route(self.command, self.path, body)
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # bound and listening before the thread starts
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        assert self.httpd is not None
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class FakeSglang:
    """SGLang's weight-update surface: loads the directory for real (with load_model) like the server would."""

    mode: str = "ok"
    """ok | refuse (400, success=false) | crash (500 text) | forget_version (loads, reports the old version)
    | no_version_field (an SGLang release without weight_version)."""
    model_path: str = "Qwen/Qwen3-30B-A3B"
    weight_version: str = "default"  # ServerArgs.weight_version's default
    loaded: torch.nn.Module | None = None

    def route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if (method, path) == ("POST", "/update_weights_from_disk"):
            if self.mode == "crash":
                return 500, b"Internal Server Error"
            if self.mode == "refuse":
                return 400, {"success": False, "message": "Failed to get weights iterator: no safetensors", "num_paused_requests": 0}
            self.loaded = load_model(body["model_path"])
            self.model_path = body["model_path"]
            if self.mode != "forget_version" and body.get("weight_version") is not None:
                self.weight_version = body["weight_version"]
            return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
        if (method, path) == ("GET", "/get_model_info"):
            info = {"model_path": self.model_path, "tokenizer_path": self.model_path, "is_generation": True,
                    "preferred_sampling_params": None, "weight_version": self.weight_version}
            if self.mode == "no_version_field":
                del info["weight_version"]
            return 200, info
        return 404, {"detail": "Not Found"}


class FakeVllmModel:
    """Stands in for vLLM's nn.Module: `load_weights` takes (HF name, tensor) pairs and returns the names loaded."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def load_weights(self, weights: Any) -> set[str]:
        for name, tensor in weights:
            self.tensors[name] = tensor
        return set(self.tensors)


class FakeVllmWorker(LegoWeightReloader):
    """What --worker-extension-cls makes of a GPU worker: the extension's methods with `self.model_runner`."""

    def __init__(self) -> None:
        self.model_runner = SimpleNamespace(model=FakeVllmModel())


@dataclass
class FakeVllm:
    """`vllm serve` in dev mode with the extension: /collective_rpc runs the method on every worker."""

    workers: list[FakeVllmWorker] = field(default_factory=lambda: [FakeVllmWorker(), FakeVllmWorker()])  # TP=2

    def route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if (method, path) == ("POST", "/collective_rpc"):
            try:
                results = [getattr(w, body["method"])(*body.get("args", []), **body.get("kwargs", {})) for w in self.workers]
            except Exception:  # FastAPI's answer to an exception a worker raised
                return 500, b"Internal Server Error"
            return 200, {"results": results}
        if (method, path) == ("POST", "/reset_prefix_cache"):
            return 200, b""
        return 404, {"detail": "Not Found"}


@pytest.fixture
def sglang() -> Iterator[tuple[FakeSglang, FakeServer]]:
    state = FakeSglang()
    server = FakeServer(route=state.route).start()
    yield state, server
    server.stop()


@pytest.fixture
def vllm() -> Iterator[tuple[FakeVllm, FakeServer]]:
    state = FakeVllm()
    server = FakeServer(route=state.route).start()
    yield state, server
    server.stop()


def _disk(tmp_path: Path, model_dir: Path, *servers: Any) -> DiskWeightPublisher:
    return DiskWeightPublisher(config=DiskPublishConfig(root=tmp_path / "weights", model_dir=model_dir), servers=servers)


# ---- disk ---------------------------------------------------------------------------


def test_a_published_directory_loads_back_to_identical_tensors(tmp_path: Path, model_dir: Path, model: torch.nn.Module) -> None:
    disk = _disk(tmp_path, model_dir)
    disk.publish(1, model)
    state = _changed(model, 0.5)
    disk.publish(2, state)

    first, second = tmp_path / "weights" / "v1", tmp_path / "weights" / "v2"
    _assert_same_parameters(load_model(first), model)
    reloaded = load_model(second)
    for name, tensor in reloaded.named_parameters():
        assert torch.equal(tensor, state[name]), name
    assert read_manifest_version(second) == 2
    assert json.loads((second / "config.json").read_text()) == json.loads((model_dir / "config.json").read_text())
    on_disk = load_file(second / "model.safetensors")
    assert "lm_head.weight" not in on_disk  # tied to embed_tokens, as save_pretrained writes it
    assert "model.layers.0.mlp.experts.0.gate_proj.weight" in on_disk  # the layout vLLM/SGLang map
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v1", "v2"]


def test_bfloat16_on_disk_and_only_the_newest_versions_are_kept(tmp_path: Path, model_dir: Path, model: torch.nn.Module) -> None:
    disk = DiskWeightPublisher(config=DiskPublishConfig(root=tmp_path / "w", model_dir=model_dir, dtype="bfloat16",
                                                        keep_versions=2))
    for version in (1, 2, 3):
        disk.publish(version, model)
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["v2", "v3"]
    assert {t.dtype for t in load_file(tmp_path / "w" / "v3" / "model.safetensors").values()} == {torch.bfloat16}


def test_an_older_or_equal_version_is_refused_even_after_a_restart(tmp_path: Path, model_dir: Path,
                                                                   model: torch.nn.Module) -> None:
    _disk(tmp_path, model_dir).publish(3, model)
    restarted = _disk(tmp_path, model_dir)  # reads v3 from the directory
    for stale in (2, 3):
        with pytest.raises(WeightSyncError) as caught:
            restarted.publish(stale, model)
        assert caught.value.version == stale and f"v{stale}" in str(caught.value) and "v3" in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v3"]


# ---- SGLang -------------------------------------------------------------------------


def test_sglang_loads_the_directory_with_the_version_and_reports_it_back(tmp_path: Path, model_dir: Path,
                                                                         model: torch.nn.Module, sglang: Any) -> None:
    state, server = sglang
    sync = SglangWeightSync(config=SglangSyncConfig(base_url=server.url))
    _disk(tmp_path, model_dir, sync).publish(7, model)

    path = str(tmp_path / "weights" / "v7")
    assert [(r.method, r.path, r.body) for r in server.requests] == [
        ("POST", "/update_weights_from_disk",
         {"model_path": path, "load_format": None, "abort_all_requests": False, "weight_version": "7"}),
        ("GET", "/get_model_info", None),
    ]
    assert state.loaded is not None
    _assert_same_parameters(state.loaded, model)
    assert sync.served_version() == 7 and sync.last_version == 7


@pytest.mark.parametrize(("mode", "status", "words"), [
    ("refuse", 400, "no safetensors"),
    ("crash", 500, "Internal Server Error"),
])
def test_a_failing_sglang_raises_naming_the_server_and_version(tmp_path: Path, model_dir: Path, model: torch.nn.Module,
                                                              sglang: Any, mode: str, status: int, words: str) -> None:
    state, server = sglang
    state.mode = mode
    disk = _disk(tmp_path, model_dir, SglangWeightSync(config=SglangSyncConfig(base_url=server.url)))
    with pytest.raises(WeightSyncError) as caught:
        disk.publish(4, model)
    error = caught.value
    assert error.server_url == server.url + "/update_weights_from_disk"
    assert (error.version, error.status) == (4, status) and words in error.server_message
    assert server.url in str(error) and "v4" in str(error)
    assert disk.last_version is None  # not published: the next try may use the same version


def test_an_sglang_that_does_not_report_the_new_version_is_an_error(tmp_path: Path, model_dir: Path,
                                                                    model: torch.nn.Module, sglang: Any) -> None:
    state, server = sglang
    state.mode = "forget_version"
    with pytest.raises(WeightSyncError, match="weight_version='default'"):
        _disk(tmp_path, model_dir, SglangWeightSync(config=SglangSyncConfig(base_url=server.url))).publish(1, model)


def test_an_sglang_without_weight_version_is_checked_by_model_path(tmp_path: Path, model_dir: Path,
                                                                  model: torch.nn.Module, sglang: Any) -> None:
    state, server = sglang
    state.mode = "no_version_field"
    sync = SglangWeightSync(config=SglangSyncConfig(base_url=server.url))
    _disk(tmp_path, model_dir, sync).publish(2, model)
    assert state.model_path == str(tmp_path / "weights" / "v2") and sync.last_version == 2
    assert sync.served_version() == 2  # read from the v<N> directory name


def test_a_server_sync_refuses_an_older_version_without_calling_the_server(tmp_path: Path, sglang: Any) -> None:
    _, server = sglang
    sync = SglangWeightSync(config=SglangSyncConfig(base_url=server.url), last_version=5)
    with pytest.raises(WeightSyncError, match="already given v5"):
        sync.publish(5, tmp_path)
    assert server.requests == []


def test_an_unreachable_server_raises_with_no_status(tmp_path: Path, model_dir: Path, model: torch.nn.Module) -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(WeightSyncError) as caught:
        _disk(tmp_path, model_dir, SglangWeightSync(config=SglangSyncConfig(base_url=url, timeout_s=5))).publish(1, model)
    assert caught.value.status is None and caught.value.server_url.startswith(url)
    assert "unreachable" in caught.value.server_message


# ---- vLLM ---------------------------------------------------------------------------


def test_vllm_workers_load_the_directory_through_collective_rpc(tmp_path: Path, model_dir: Path,
                                                               model: torch.nn.Module, vllm: Any) -> None:
    state, server = vllm
    sync = VllmWeightSync(config=VllmSyncConfig(base_url=server.url, timeout_s=30))
    _disk(tmp_path, model_dir, sync).publish(3, model)

    path = str(tmp_path / "weights" / "v3")
    assert [(r.method, r.path, r.body) for r in server.requests] == [
        ("POST", "/collective_rpc",
         {"method": "lego_load_weights_from_dir", "args": [path, "3"], "kwargs": {}, "timeout": 30}),
        ("POST", "/reset_prefix_cache", None),
    ]
    expected = split_experts({n: p.detach() for n, p in model.named_parameters()})
    for worker in state.workers:  # every tensor-parallel worker read the whole directory
        got = worker.model_runner.model.tensors
        assert got.keys() == expected.keys()
        assert all(torch.equal(got[n], expected[n]) for n in expected)
    assert sync.served_version() == 3


def test_a_vllm_worker_refuses_to_go_back_and_the_client_says_which_server_and_version(
    tmp_path: Path, model_dir: Path, model: torch.nn.Module, vllm: Any
) -> None:
    _, server = vllm
    _disk(tmp_path / "a", model_dir, VllmWeightSync(config=VllmSyncConfig(base_url=server.url))).publish(5, model)
    # A second trainer (fresh client, fresh directory) tries to install older weights: the workers refuse.
    with pytest.raises(WeightSyncError) as caught:
        _disk(tmp_path / "b", model_dir, VllmWeightSync(config=VllmSyncConfig(base_url=server.url))).publish(2, model)
    assert caught.value.status == 500 and caught.value.version == 2
    assert caught.value.server_url == server.url + "/collective_rpc"
    assert VllmWeightSync(config=VllmSyncConfig(base_url=server.url)).served_version() == 5


def test_a_server_sync_needs_a_published_directory(tmp_path: Path, model: torch.nn.Module, vllm: Any) -> None:
    _, server = vllm
    with pytest.raises(WeightSyncError, match="DiskWeightPublisher"):
        VllmWeightSync(config=VllmSyncConfig(base_url=server.url)).publish(1, model)
    with pytest.raises(WeightSyncError, match="not a lego-rl weights directory"):
        VllmWeightSync(config=VllmSyncConfig(base_url=server.url)).publish(1, tmp_path)
    assert server.requests == []


# ---- the embedded engine's ZeroMQ server ----------------------------------------------


@pytest.fixture(params=["zmq", "unix"])
def engine_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[EngineServer]:
    """A real `lego_rl.engine` server on a thread, on each wire (tests/engine/test_server_updates.py covers what it does mid-generation)."""
    bind = "tcp://127.0.0.1:*" if request.param == "zmq" else f"unix://{tmp_path_factory.mktemp('sock')}/engine.sock"
    with serving(EngineServerConfig(model_dir=str(model_dir), bind=bind, engine=EngineConfig())) as served:
        yield served


def test_an_engine_server_loads_each_published_version_over_its_wire(tmp_path: Path, model_dir: Path, model: torch.nn.Module,
                                                                   engine_server: EngineServer) -> None:
    sync = EngineServerWeightSync(config=EngineServerSyncConfig(address=engine_server.address, timeout_s=30))
    disk = _disk(tmp_path, model_dir, sync)
    state = _changed(model, 0.25)
    disk.publish(1, state)
    assert sync.last_version == 1 and sync.served_version() == 1 == engine_server.engine.policy_version
    for name, tensor in engine_server.engine.model.named_parameters():
        assert torch.equal(tensor, state[name]), name
    disk.publish(2, model)
    assert sync.served_version() == 2
    _assert_same_parameters(engine_server.engine.model, model)


def test_an_engine_server_refusal_names_the_server_version_and_code(tmp_path: Path, model_dir: Path, model: torch.nn.Module,
                                                                    engine_server: EngineServer) -> None:
    address = engine_server.address
    _disk(tmp_path / "a", model_dir, EngineServerWeightSync(config=EngineServerSyncConfig(address=address))).publish(5, model)
    # A second trainer (fresh client, fresh directory) tries to install older weights: the engine refuses and keeps v5.
    with pytest.raises(WeightSyncError) as caught:
        _disk(tmp_path / "b", model_dir, EngineServerWeightSync(config=EngineServerSyncConfig(address=address))).publish(2, model)
    error = caught.value
    assert (error.server_url, error.version, error.status) == (address, 2, None)
    assert error.server_message.startswith("weight_update: ") and "must increase" in error.server_message
    assert EngineServerWeightSync(config=EngineServerSyncConfig(address=address)).served_version() == 5
    # A directory the engine cannot read (gone by the time it looks) is refused the same way.
    published = _disk(tmp_path / "c", model_dir)
    path = published.write(6, model)
    (path / "model.safetensors").unlink()
    with pytest.raises(WeightSyncError, match="weight_update: .*no \\*.safetensors"):
        EngineServerWeightSync(config=EngineServerSyncConfig(address=address)).publish(6, path)
    assert engine_server.engine.policy_version == 5


def test_an_engine_server_nobody_serves_on_a_unix_socket_is_named(tmp_path: Path, model: torch.nn.Module) -> None:
    address = f"unix://{tmp_path}/nobody.sock"
    with pytest.raises(WeightSyncError, match=r"cannot connect to unix://.*nobody.sock.*is the engine server running\?"):
        EngineServerWeightSync(config=EngineServerSyncConfig(address=address, timeout_s=5)).served_version()
    with pytest.raises(WeightSyncError, match=r"unix:///ABSOLUTE/PATH"):
        EngineServerWeightSync(config=EngineServerSyncConfig(address="unix://engine.sock", timeout_s=5)).served_version()


def test_an_engine_server_that_does_not_answer_times_out(tmp_path: Path, model_dir: Path, model: torch.nn.Module) -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    sync = EngineServerWeightSync(config=EngineServerSyncConfig(address=address, timeout_s=0.3))
    with pytest.raises(WeightSyncError, match="no reply to update_weights within 0.3 s") as caught:
        _disk(tmp_path, model_dir, sync).publish(1, model)
    assert caught.value.server_url == address and sync.last_version is None


# ---- wiring -------------------------------------------------------------------------


def test_local_policy_hands_its_model_to_every_publisher(model: torch.nn.Module) -> None:
    seen: list[tuple[int, object]] = []

    class Recorder:
        def publish(self, version: int, weights: object) -> None:
            seen.append((version, weights))

    policy = LocalPolicy(updater=SimpleNamespace(model=model), layers=1, top_k=1,  # type: ignore[arg-type]
                         publishers=[Recorder(), Recorder()])
    policy.publish(4)
    assert seen == [(4, model), (4, model)]


@pytest.mark.parametrize("flag", [["--sync-vllm", "http://127.0.0.1:1"], ["--sync-engine", "tcp://127.0.0.1:1"]])
def test_train_refuses_server_sync_without_a_weights_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    from lego_rl.cluster.train import main

    with pytest.raises(SystemExit) as caught:
        main(["--model", str(tmp_path), "--checkpoints", str(tmp_path), "--toy-steps", "1", *flag])
    assert caught.value.code == 2 and "--weights-dir" in capsys.readouterr().err
