"""The engine over each wire (ZeroMQ, a Unix socket): real sockets, a client per test, the tiny byte-tokenizer model."""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from lego_rl.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from lego_rl.engine.server import EngineServer, EngineServerConfig
from lego_rl.model import load_model
from lego_rl.model.tiny import write_tiny_model
from lego_rl.schema import encode_control
from lego_rl.schema.generated import SCHEMA_MAJOR, SCHEMA_VERSION, Abort, Ack, EngineHello, EngineInfo, Error, GenerateRequest, GenerateResult, TokenChunk

from .server_support import Client, serving

# A room big enough that an un-aborted request would run for seconds, so the abort test
# cannot pass by the request finishing on its own.
ENGINE = EngineConfig(max_context=4096)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-bytes", tokenizer="bytes", seed=0)


@pytest.fixture(scope="module", params=["zmq", "unix"])
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[EngineServer]:
    """The same server on each wire: every test below holds for both."""
    bind = "tcp://127.0.0.1:*" if request.param == "zmq" else f"unix://{tmp_path_factory.mktemp('sock')}/engine.sock"
    with serving(EngineServerConfig(model_dir=str(model_dir), bind=bind, engine=ENGINE)) as served:
        yield served


@pytest.fixture
def client(server: EngineServer) -> Iterator[Client]:
    c = Client(server.address)
    yield c
    c.close()


def generate(rid: str, prompt: list[int], *, max_tokens: int = 8, temperature: float = 0.0, seed: int | None = None,
             stop: tuple[int, ...] = (), stream: bool = True, **extra: Any) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid, model=extra.get("model"), policy_version=extra.get("policy_version"),
        prompt_token_ids=np.array(prompt, dtype=np.int32), temperature=temperature, top_p=1.0, max_tokens=max_tokens,
        stop_token_ids=np.array(stop, dtype=np.int32), seed=seed, stream=stream,
    )


def as_engine_request(req: GenerateRequest) -> GenerationRequest:
    return GenerationRequest(request_id=req.request_id, prompt_token_ids=tuple(req.prompt_token_ids.tolist()), sampling=SamplingParams(
        temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens, stop_token_ids=tuple(req.stop_token_ids.tolist()), seed=req.seed))


def test_concurrent_requests_stream_the_same_tokens_logprobs_and_routing_as_the_in_process_engine(model_dir: Path, server: EngineServer, client: Client):
    requests = [
        generate("a", list(b"Hello, world"), max_tokens=12),
        generate("b", list(b"def f(x):"), max_tokens=9, stop=(10, 32)),
        generate("c", list(b"<|im_start|>user"), max_tokens=10, temperature=1.0, seed=1234),
        generate("d", [257, *b"x" * 40], max_tokens=6),
    ]
    for req in requests:
        client.send(req)
    chunks_of: dict[str, list[TokenChunk]] = {r.request_id: [] for r in requests}
    results: dict[str, GenerateResult] = {}
    while len(results) < len(requests):
        message = client.recv()
        if isinstance(message, GenerateResult):
            results[message.request_id] = message
        else:
            assert isinstance(message, TokenChunk) and message.request_id not in results, message
            chunks_of[message.request_id].append(message)
    expected = Engine.from_model_dir(model_dir, ENGINE).generate([as_engine_request(r) for r in requests])
    for req in requests:
        chunks, result = chunks_of[req.request_id], results[req.request_id]
        want = expected[req.request_id]
        streamed = [int(t) for c in chunks for t in c.token_ids]
        assert streamed == result.completion_token_ids.tolist() == want.completion_token_ids
        assert np.concatenate([c.logprobs for c in chunks]).tobytes() == result.logprobs.tobytes()
        # Batch neighbours change logits by GEMM rounding only (docs/model.md "Per-sequence KV caches").
        np.testing.assert_allclose(result.logprobs, want.logprobs.numpy(), rtol=0, atol=1e-5)
        assert result.finish_reason == want.finish_reason
        assert req.seed is None or result.seed == req.seed
        assert (result.moe_layers, result.top_k) == (4, 2)
        assert np.array_equal(result.prompt_routing.reshape(-1, 4, 2), want.prompt_routing.numpy())
        assert np.array_equal(result.completion_routing.reshape(-1, 4, 2), want.completion_routing.numpy())
        assert result.policy_version == 0 and all(c.policy_version == 0 for c in chunks)


def test_without_stream_only_the_result_is_sent_and_an_unseeded_request_reports_a_js_safe_seed(client: Client):
    client.send(generate("quiet", [1, 2, 3], max_tokens=3, temperature=1.0, stream=False))
    result = client.recv()
    assert isinstance(result, GenerateResult) and len(result.completion_token_ids) == 3
    assert 0 <= result.seed < 2**53


def test_a_request_asking_for_its_final_tokens_in_the_result_gets_no_chunk_for_its_last_step(model_dir: Path, client: Client):
    plain = generate("plain", list(b"Hello"), max_tokens=6)
    folded = dataclasses.replace(plain, request_id="folded", final_tokens_in_result=True)
    reference = Engine.from_model_dir(model_dir, ENGINE).generate([as_engine_request(plain)])["plain"]
    for req in (folded, plain):
        client.send(req)
        chunks, result = client.until_result(req.request_id)
        streamed = [int(t) for c in chunks for t in c.token_ids]
        # The result always has the whole completion; the chunks are all of it, or all but the step that ended it.
        assert result.completion_token_ids.tolist() == reference.completion_token_ids
        assert streamed == (reference.completion_token_ids[:-1] if req is folded else reference.completion_token_ids)
        assert np.concatenate([c.logprobs for c in chunks]).tobytes() == result.logprobs[: len(streamed)].tobytes()


def test_a_folded_request_ending_in_the_same_step_as_another_clients_plain_one_of_the_same_id_leaves_that_ones_chunks_alone(
        server: EngineServer, client: Client):
    other = Client(server.address)
    try:
        plain = generate("same", list(b"Hello"), max_tokens=5)
        # The request ids are scoped per client, so only this client's request may leave its last step to the result.
        client.send(dataclasses.replace(plain, final_tokens_in_result=True))
        other.send(plain)
        folded_chunks, folded = client.until_result("same")
        plain_chunks, result = other.until_result("same")
        assert folded.completion_token_ids.tolist() == result.completion_token_ids.tolist() and len(result.completion_token_ids) == 5
        assert [int(t) for c in plain_chunks for t in c.token_ids] == result.completion_token_ids.tolist()
        assert [int(t) for c in folded_chunks for t in c.token_ids] == folded.completion_token_ids.tolist()[:-1]
        # Ending on a stop token instead of the length: the same, the stop token in the result only.
        stop = int(result.completion_token_ids[2])
        client.send(dataclasses.replace(plain, request_id="stops", stop_token_ids=np.array([stop], dtype=np.int32), final_tokens_in_result=True))
        chunks, stopped = client.until_result("stops")
        assert stopped.finish_reason == "stop" and stopped.completion_token_ids.tolist()[-1] == stop
        assert [int(t) for c in chunks for t in c.token_ids] == stopped.completion_token_ids.tolist()[:-1]
    finally:
        other.close()


def test_hello_describes_the_served_model(server: EngineServer, client: Client):
    client.send(EngineHello(client_id="test", schema_version=SCHEMA_VERSION))
    info = client.recv()
    assert info == EngineInfo(model="tiny-bytes", policy_version=0, vocab_size=259, max_context=4096, moe_layers=4, top_k=2,
                              num_experts=8, active_requests=0, schema_version=SCHEMA_VERSION)


def test_abort_stops_a_running_request_and_returns_what_it_produced(client: Client):
    client.send(generate("long", [1, 2, 3], max_tokens=4000))
    first = client.recv()
    assert isinstance(first, TokenChunk) and first.request_id == "long"
    client.send(Abort(request_id="long"))
    chunks, result = client.until_result("long")
    assert result.finish_reason == "abort"
    assert result.completion_token_ids.tolist() == [int(first.token_ids[0])] + [int(t) for c in chunks for t in c.token_ids]
    assert len(result.completion_token_ids) < 4000
    # Frames of one connection are handled in order, so this reply reflects the abort.
    client.send(EngineHello(client_id="test", schema_version=SCHEMA_VERSION))
    assert client.recv().active_requests == 0


def test_two_clients_may_use_the_same_request_id(server: EngineServer, client: Client):
    other = Client(server.address)
    try:
        client.send(generate("same", [5, 6], max_tokens=2))
        other.send(generate("same", [7, 8], max_tokens=3))
        assert len(client.until_result("same")[1].completion_token_ids) == 2
        assert len(other.until_result("same")[1].completion_token_ids) == 3
    finally:
        other.close()


BAD_INPUTS: dict[str, tuple[list[bytes], str, str | None, str | None]] = {
    # name: (frames, code, request_id, field)
    "out-of-vocabulary id": ([encode_control(generate("oov", [1, 259]))], "invalid_request", "oov", "prompt_token_ids"),
    "prompt as long as the context": ([encode_control(generate("long", [1] * 4096))], "invalid_request", "long", "prompt_token_ids"),
    "max_tokens 0": ([encode_control(generate("zero", [1], max_tokens=0))], "invalid_request", "zero", "sampling.max_tokens"),
    "negative temperature": ([encode_control(generate("t", [1], temperature=-1.0))], "invalid_request", "t", "sampling.temperature"),
    "unknown model": ([encode_control(generate("m", [1], model="qwen3-235b"))], "unknown_model", "m", "model"),
    "unknown policy version": ([encode_control(generate("v", [1], policy_version=5))], "policy_version", "v", "policy_version"),
    "not msgpack": ([b"\xc1"], "bad_frame", None, None),
    "ids as a msgpack list, not bin": (
        [msgpack.packb({**msgpack.unpackb(encode_control(generate("lst", [1]))), "prompt_token_ids": [1, 2]})], "bad_frame", "lst", None),
    "unknown kind": ([msgpack.packb({"kind": "generate_all", "request_id": "k"})], "bad_frame", "k", None),
    "a message engines do not take": ([encode_control(Ack(batch_id="b", status="accepted", reason=None))], "unexpected_message", None, None),
    "another schema major": ([encode_control(EngineHello(client_id="old", schema_version=f"{SCHEMA_MAJOR + 1}.0.0"))], "schema_version", None, None),
    "abort of an unknown request": ([encode_control(Abort(request_id="ghost"))], "unknown_request", "ghost", "request_id"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_gets_an_error_reply_and_the_server_keeps_serving(client: Client, name: str):
    frames, code, request_id, field = BAD_INPUTS[name]
    client.send_raw(*frames)
    error = client.recv()
    assert isinstance(error, Error), error
    assert (error.code, error.request_id, error.field) == (code, request_id, field), error.message
    assert error.message
    client.send(generate("after", [1, 2, 3], max_tokens=2))
    assert client.until_result("after")[1].finish_reason == "length"


# A Unix-socket stream has no multi-frame messages (its framing errors: the next test).
@pytest.mark.parametrize("server", ["zmq"], indirect=True)
def test_a_zeromq_message_of_two_frames_gets_bad_frame_and_the_server_keeps_serving(client: Client):
    assert client.unix is None
    client.send_raw(b"a", b"b")
    error = client.recv()
    assert isinstance(error, Error) and error.code == "bad_frame", error
    client.send(generate("after", [1, 2, 3], max_tokens=2))
    assert client.until_result("after")[1].finish_reason == "length"


# ZeroMQ never tells the server a client went away: its requests run to their end.
@pytest.mark.parametrize("server", ["unix"], indirect=True)
def test_a_unix_socket_client_that_goes_away_or_breaks_the_framing_has_its_requests_aborted(server: EngineServer, client: Client):
    assert client.unix is not None
    before = server.stats["aborts"]
    gone = Client(server.address)
    gone.send(generate("long", [1, 2], max_tokens=4000))
    assert isinstance(gone.recv(), TokenChunk)  # it runs
    gone.close()
    broken = Client(server.address)
    broken.send(generate("long", [1, 2], max_tokens=4000))
    assert isinstance(broken.recv(), TokenChunk)
    broken.send_bytes((2**31).to_bytes(4, "big"))  # a length no control frame has: the stream cannot be read on
    with pytest.raises(AssertionError, match="closed the connection"):
        while True:
            broken.recv()  # the rest of its stream, then the close
    broken.close()
    client.send(generate("after", [1, 2, 3], max_tokens=2))  # meanwhile everyone else is served
    assert client.until_result("after")[1].finish_reason == "length"
    assert server.stats["aborts"] == before + 2


def test_a_next_turn_reports_the_prompt_tokens_its_prefix_cache_served(client: Client):
    chunk = ENGINE.prefill_chunk
    system = [(7 * i) % 256 for i in range(2 * chunk + 30)]  # system prompt and task: two whole chunks and a tail
    client.send(generate("t1", system, max_tokens=10))
    _, first = client.until_result("t1")
    assert first.cached_prompt_tokens == 0 and first.policy_versions.tolist() == [0] * 10
    history = system + first.completion_token_ids.tolist() + [33] * 20  # + the tool's result
    client.send(generate("t2", history, max_tokens=4, stream=False))
    second = client.recv()
    assert isinstance(second, GenerateResult) and second.cached_prompt_tokens == 2 * chunk


def test_a_duplicate_running_request_id_is_refused_naming_the_clients_own_id(client: Client):
    client.send(generate("dup", [1, 2], max_tokens=4000))
    client.send(generate("dup", [1, 2], max_tokens=2))
    client.send(Abort(request_id="dup"))
    errors = []
    while not isinstance(message := client.recv(), GenerateResult):
        if isinstance(message, Error):
            errors.append(message)
    assert [(e.code, e.request_id, e.field) for e in errors] == [("invalid_request", "dup", "request_id")]
    assert "'dup'" in errors[0].message and "/dup" not in errors[0].message
    assert message.finish_reason == "abort"


def test_python_m_lego_rl_engine_drains_on_sigterm_finishing_every_accepted_request(model_dir: Path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "lego_rl.engine", "--model", str(model_dir), "--bind", "tcp://127.0.0.1:*", "--name", "tiny"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        listening = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert listening["type"] == "listening" and listening["model"] == "tiny"
        c = Client(listening["address"])
        for i in range(3):
            c.send(generate(f"cli-{i}", [1, 2, 3 + i], max_tokens=30, model="tiny"))
        c.send(generate("long", [4, 5], max_tokens=4000, model="tiny"))  # keeps the drain going until aborted
        first = c.recv()
        assert isinstance(first, TokenChunk)  # they are running
        proc.send_signal(signal.SIGTERM)
        assert json.loads(proc.stdout.readline()) == {"type": "draining", "timeout_s": 30.0}  # type: ignore[union-attr]
        c.send(generate("late", [1, 2], max_tokens=2, model="tiny"))
        results, refused = {}, []
        while not refused or len(results) < 3:
            message = c.recv()
            if isinstance(message, GenerateResult):
                results[message.request_id] = message
            elif isinstance(message, Error):
                refused.append(message)
        assert [(e.code, e.request_id) for e in refused] == [("shutting_down", "late")]
        assert all(r.finish_reason == "length" and len(r.completion_token_ids) == 30 for r in results.values())
        c.send(Abort(request_id="long"))  # a client may still abort while the engine drains
        while not isinstance(message := c.recv(), GenerateResult):
            assert isinstance(message, TokenChunk) and message.request_id == "long", message
        assert message.request_id == "long" and message.finish_reason == "abort"
        assert proc.wait(timeout=30) == 0
        stopped = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert stopped["type"] == "stopped"
        assert stopped["stats"] == {"requests": 4, "results": 4, "errors": 1, "aborts": 1, "weight_updates": 0, "step_failures": 0}
        assert stopped["engine"]["prompt_tokens"] == 3 * 3 + 2
        c.close()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_the_ray_actor_serves_the_engine_over_zeromq(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ray = pytest.importorskip("ray")
    from lego_rl.cluster.engine_server_actor import start_engine_server

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        actor = start_engine_server(EngineServerConfig(model_dir=str(model_dir), bind="tcp://127.0.0.1:*", model_name="tiny"))
        c = Client(ray.get(actor.address.remote()))
        c.send(generate("ray", [1, 2, 3], max_tokens=3, model="tiny"))
        chunks, result = c.until_result("ray")
        assert len(chunks) == 3 and result.finish_reason == "length"
        assert ray.get(actor.stats.remote())["results"] == 1
        # A weights folder as the trainer publishes it reaches the engine through the actor's own socket.
        from lego_rl.weights import DiskPublishConfig, DiskWeightPublisher

        disk = DiskWeightPublisher(config=DiskPublishConfig(root=tmp_path / "weights", model_dir=model_dir))
        disk.publish(1, load_model(model_dir).state_dict())
        assert ray.get(actor.update_weights.remote(str(tmp_path / "weights" / "v1"), 1)) == 1
        assert ray.get(actor.policy_version.remote()) == 1
        c.send(generate("ray-v1", [1, 2, 3], max_tokens=2, model="tiny"))
        assert c.until_result("ray-v1")[1].policy_version == 1
        c.close()
        ray.get(actor.stop.remote())
    finally:
        ray.shutdown()


def test_a_bind_address_the_wires_do_not_know_or_a_path_that_is_no_socket_is_refused_naming_it(tmp_path: Path):
    from lego_rl.engine.wire import open_wire

    with pytest.raises(ValueError, match=r"http://x.*tcp://HOST:PORT or ipc://PATH \(ZeroMQ\) or unix:///PATH"):
        open_wire("http://x")
    with pytest.raises(ValueError, match="ABSOLUTE"):
        open_wire("unix://relative.sock")
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me")
    with pytest.raises(ValueError, match="exists and is not a socket"):
        open_wire(f"unix://{precious}")
    assert precious.read_text() == "keep me"
    # Where an engine still serves, a second one is refused and the first keeps its socket file.
    stale = tmp_path / "engine.sock"
    first = open_wire(f"unix://{stale}")
    with pytest.raises(ValueError, match="another process is serving there"):
        open_wire(f"unix://{stale}")
    assert stale.exists()
    # A socket file an engine left behind (it died) is replaced, and the new wire serves.
    first._listener.close()  # type: ignore[attr-defined]  # dies without unlinking
    second = open_wire(f"unix://{stale}")
    try:
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.connect(str(stale))
        peer.sendall((3).to_bytes(4, "big") + b"abc")
        assert second.poll(5000)
        assert second.recv()[1] == b"abc"
        peer.close()
    finally:
        second.close()
    assert not stale.exists()
    # The first engine, closing late, does not remove a file that is no longer its own.
    third = open_wire(f"unix://{stale}")
    try:
        first.close()
        assert stale.exists()
    finally:
        third.close()


def test_frames_a_unix_socket_client_sent_before_it_went_away_start_nothing(tmp_path: Path):
    from lego_rl.engine.wire import open_wire

    wire = open_wire(f"unix://{tmp_path / 'engine.sock'}")
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(tmp_path / "engine.sock"))
        client.sendall(b"".join((1).to_bytes(4, "big") + bytes([i]) for i in range(10)))
        assert wire.poll(5000)
        peer, first = wire.recv()
        assert first == b"\x00"
        client.close()
        wire.send(peer, b"reply")  # the peer is gone: the send fails and drops it, with its 9 frames not yet handled
        assert wire.take_gone() == [peer]
        assert not wire.poll(0)
    finally:
        wire.close()
