"""A real engine server on a thread and a client speaking its frames (a DEALER, or a Unix socket), for the server tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import zmq

from lego_rl.engine.server import EngineServer, EngineServerConfig
from lego_rl.engine import ClientConnection
from lego_rl.schema import decode_control, encode_control
from lego_rl.schema.generated import GenerateResult, TokenChunk

REPLY_TIMEOUT_MS = 30_000  # a missing reply fails the test; it never paces it


@contextmanager
def serving(config: EngineServerConfig) -> Iterator[EngineServer]:
    """The server `config` builds, serving on a thread until the block ends."""
    served = config.build()
    stop = threading.Event()
    thread = threading.Thread(target=served.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        yield served
    finally:
        stop.set()
        thread.join()
        served.close()


class Client:
    """One connection to an engine server: a DEALER, or for a `unix://` address the wire's own ClientConnection."""

    def __init__(self, address: str) -> None:
        self.unix: ClientConnection | None = None
        if address.startswith("unix://"):
            self.unix = ClientConnection(address)
            return
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)

    def send(self, message: Any) -> None:
        self.send_raw(encode_control(message))

    def send_raw(self, *frames: bytes) -> None:
        """One message of `frames` (ZeroMQ); over a Unix socket, each frame as a message of its own."""
        if self.unix is not None:
            for frame in frames:
                self.unix.send(frame)
        else:
            self.socket.send_multipart(list(frames))

    def send_bytes(self, data: bytes) -> None:
        """Bytes as they are, no framing (Unix socket only): for a stream that breaks the framing."""
        assert self.unix is not None
        self.unix._unix.sendall(data)  # type: ignore[union-attr]

    def recv(self) -> Any:
        if self.unix is None:
            assert self.socket.poll(REPLY_TIMEOUT_MS), "no reply from the engine server"
            return decode_control(self.socket.recv())
        try:
            frame = self.unix.recv(REPLY_TIMEOUT_MS)
        except ConnectionError as error:
            raise AssertionError("the engine server closed the connection") from error
        assert frame is not None, "no reply from the engine server"
        return decode_control(frame)

    def ask(self, message: Any) -> Any:
        self.send(message)
        return self.recv()

    def until_result(self, request_id: str) -> tuple[list[TokenChunk], GenerateResult]:
        """The request's token chunks, then its result; any other reply fails the test."""
        chunks = []
        while not isinstance(message := self.recv(), GenerateResult):
            assert isinstance(message, TokenChunk) and message.request_id == request_id, message
            chunks.append(message)
        assert message.request_id == request_id, message
        return chunks, message

    def close(self) -> None:
        if self.unix is not None:
            self.unix.close()
        else:
            self.socket.close(linger=0)
