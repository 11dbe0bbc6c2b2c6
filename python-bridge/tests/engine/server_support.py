"""A real engine server on a thread and a DEALER client speaking its frames, for the server tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import zmq

from lego_rl.engine.server import EngineServer, EngineServerConfig
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
    """One DEALER connection to an engine server."""

    def __init__(self, address: str) -> None:
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)

    def send(self, message: Any) -> None:
        self.socket.send(encode_control(message))

    def send_raw(self, *frames: bytes) -> None:
        self.socket.send_multipart(list(frames))

    def recv(self) -> Any:
        assert self.socket.poll(REPLY_TIMEOUT_MS), "no reply from the engine server"
        return decode_control(self.socket.recv())

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
        self.socket.close(linger=0)
