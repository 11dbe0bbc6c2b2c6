"""How the engine server's control frames travel: a ZeroMQ ROUTER, or a Unix stream socket.

The server is the same either way (server.py): it polls its wire, takes `(peer, frame)`
pairs, and sends frames back to a peer. The address picks the wire:

- `tcp://HOST:PORT`, `ipc://PATH`: a bound ROUTER; the peer is the DEALER's identity. ZeroMQ
  never says a client went away, so its requests run to the end and their replies are dropped.
- `unix:///PATH`: a listening Unix stream socket; each frame is a 4-byte big-endian length
  then its bytes (docs/model.md "Serving over a Unix socket"). For a proxy on the same host: a
  message costs one write and one read, where ZeroMQ hands it through an I/O thread on each
  side. A client that disconnects is reported (`take_gone`) so the server aborts its
  requests at once, and its frames not yet handled are dropped. A socket file whose engine
  is gone is replaced; binding where an engine still serves is refused. A frame longer than
  MAX_FRAME_BYTES closes that connection (the stream is not control frames); a client that
  stops reading while more than MAX_UNSENT_BYTES wait for it is disconnected rather than let
  the engine's memory grow. Out of file descriptors, accepting pauses for 100 ms at a time
  while the connected clients are served.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import stat
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import zmq

MAX_FRAME_BYTES = 1 << 30
MAX_UNSENT_BYTES = 256 << 20
_READ_BYTES = 1 << 18


class Wire(Protocol):
    @property
    def address(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def poll(self, timeout_ms: int) -> bool:
        """True once a frame is waiting (within `timeout_ms`; 0 = do not wait)."""
    def recv(self) -> tuple[bytes, Any]:
        """The next `(peer, frame)`; `frame` is None when the message was not one frame."""
    def send(self, peer: bytes, data: bytes) -> None: ...
    def take_gone(self) -> list[bytes]:
        """Peers that disconnected since the last call."""
    def close(self) -> None: ...


def _unix_path(address: str, what: str) -> str | None:
    """The socket path of a `unix:///PATH` address, None for a ZeroMQ one; a ValueError names `what` and the accepted forms."""
    if address.startswith("unix://"):
        path = address[len("unix://"):]
        if not path.startswith("/"):
            raise ValueError(f"{what} {address!r}: a Unix socket address is unix:///ABSOLUTE/PATH")
        return path
    if address.startswith(("tcp://", "ipc://")):
        return None
    raise ValueError(f"{what} {address!r}: expected tcp://HOST:PORT or ipc://PATH (ZeroMQ) or unix:///PATH (a Unix socket)")


def _cut_frames(box: bytearray) -> list[bytes]:
    """Takes every whole length-prefixed frame off the front of `box`; a ValueError for a length no control frame has."""
    frames = []
    start = 0
    while len(box) - start >= 4:
        length = int.from_bytes(box[start:start + 4], "big")
        if length > MAX_FRAME_BYTES:
            raise ValueError(f"a frame length of {length} bytes (over {MAX_FRAME_BYTES}): not a control-frame stream")
        end = start + 4 + length
        if len(box) < end:
            break
        frames.append(bytes(box[start + 4:end]))
        start = end
    if start:
        del box[:start]
    return frames


def open_wire(bind: str, context: zmq.Context[Any] | None = None) -> Wire:
    """The wire for `bind` (module doc); a ValueError names the accepted forms."""
    path = _unix_path(bind, "bind")
    if path is not None:
        return UnixStreamWire(path)
    return ZmqWire(bind, context or zmq.Context.instance())


class ZmqWire:
    def __init__(self, bind: str, context: zmq.Context[Any]) -> None:
        self._socket = context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(bind)

    @property
    def address(self) -> str:
        return self._socket.getsockopt_string(zmq.LAST_ENDPOINT)

    @property
    def closed(self) -> bool:
        return bool(self._socket.closed)

    def poll(self, timeout_ms: int) -> bool:
        return bool(self._socket.poll(timeout_ms))

    def recv(self) -> tuple[bytes, Any]:
        frames = self._socket.recv_multipart(copy=False)
        return frames[0].bytes, (frames[1].buffer if len(frames) == 2 else None)

    def send(self, peer: bytes, data: bytes) -> None:
        self._socket.send_multipart([peer, data])

    def take_gone(self) -> list[bytes]:
        return []

    def close(self) -> None:
        self._socket.close(linger=0)


def _file_identity(path: str) -> tuple[int, int, int]:
    """Tells a file from a later one at the same path (an inode number alone is reused)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_ctime_ns


@dataclass(slots=True)
class _Conn:
    sock: socket.socket
    peer: bytes
    inbox: bytearray = field(default_factory=bytearray)
    outbox: deque[memoryview] = field(default_factory=deque)
    unsent: int = 0


class UnixStreamWire:
    def __init__(self, path: str) -> None:
        self._path = path
        # A socket file left by an engine that died is replaced; a live engine's, or any other file, is not ours to remove.
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise ValueError(f"bind unix://{path}: the path exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # nobody listens: left behind
            else:
                raise ValueError(f"bind unix://{path}: another process is serving there; stop it or bind another path")
            finally:
                probe.close()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(128)
        self._listener.setblocking(False)
        # close() removes the file only while it is still ours (not replaced by a later engine's).
        self._identity = _file_identity(path)
        self._accept_paused_until = 0.0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._conns: dict[bytes, _Conn] = {}
        self._ready: deque[tuple[bytes, Any]] = deque()
        self._gone: list[bytes] = []
        self._next_peer = 0
        self._closed = False

    @property
    def address(self) -> str:
        return f"unix://{self._path}"

    @property
    def closed(self) -> bool:
        return self._closed

    def poll(self, timeout_ms: int) -> bool:
        if self._ready:
            return True
        deadline = time.monotonic() + timeout_ms / 1000
        if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        while not self._closed:
            left = max(0.0, deadline - time.monotonic())
            for key, mask in self._selector.select(left):
                if key.data is None:
                    self._accept()
                else:
                    conn: _Conn = key.data
                    if mask & selectors.EVENT_WRITE:
                        self._flush(conn)
                    if mask & selectors.EVENT_READ and conn.peer in self._conns:
                        self._read(conn)
            if self._ready or left == 0.0:
                break
        return bool(self._ready)

    def recv(self) -> tuple[bytes, Any]:
        return self._ready.popleft()

    def send(self, peer: bytes, data: bytes) -> None:
        conn = self._conns.get(peer)
        if conn is None:
            return  # the client went away; its requests are being aborted (take_gone)
        head = len(data).to_bytes(4, "big")
        # A small frame goes out as one buffer (one read on the other side); a big one is not copied.
        if len(data) < 65536:
            conn.outbox.append(memoryview(head + data))
        else:
            conn.outbox.extend((memoryview(head), memoryview(data)))
        conn.unsent += 4 + len(data)
        if conn.unsent > MAX_UNSENT_BYTES:
            self._drop(conn)
            return
        self._flush(conn)

    def take_gone(self) -> list[bytes]:
        gone, self._gone = self._gone, []
        return gone

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns.values()):
            conn.sock.close()
        self._conns.clear()
        self._selector.close()
        self._listener.close()
        try:
            if _file_identity(self._path) == self._identity:
                os.unlink(self._path)
        except FileNotFoundError:
            pass

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as error:
                # Out of descriptors (or a connection that aborted): the engine keeps serving who it has;
                # new clients wait 100 ms, rather than the loop spinning on a listener it cannot accept from.
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._selector.unregister(self._listener)
                    self._accept_paused_until = time.monotonic() + 0.1
                    return
                continue
            sock.setblocking(False)
            self._next_peer += 1
            conn = _Conn(sock=sock, peer=b"unix" + self._next_peer.to_bytes(4, "big"))
            self._conns[conn.peer] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.inbox += data
        try:
            frames = _cut_frames(conn.inbox)
        except ValueError:
            self._drop(conn)  # not a control-frame stream: nothing after this can be framed
            return
        self._ready.extend((conn.peer, frame) for frame in frames)

    def _flush(self, conn: _Conn) -> None:
        while conn.outbox:
            head = conn.outbox[0]
            try:
                sent = conn.sock.send(head)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
            conn.unsent -= sent
            if sent == len(head):
                conn.outbox.popleft()
            else:
                conn.outbox[0] = head[sent:]
                break
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        if self._selector.get_key(conn.sock).events != events:
            self._selector.modify(conn.sock, events, conn)

    def _drop(self, conn: _Conn) -> None:
        if self._conns.pop(conn.peer, None) is None:
            return
        self._selector.unregister(conn.sock)
        conn.sock.close()
        self._gone.append(conn.peer)
        # Its frames not yet handled would start requests nobody reads (take_gone reports it only once).
        if any(peer == conn.peer for peer, _ in self._ready):
            self._ready = deque(item for item in self._ready if item[0] != conn.peer)


class ClientConnection:
    """A client's connection to an engine server's wire (the trainer's weight sync uses one): send frames, read replies."""

    def __init__(self, address: str) -> None:
        self._unix: socket.socket | None = None
        self._inbox = bytearray()
        self._frames: deque[bytes] = deque()
        path = _unix_path(address, "engine address")
        if path is not None:
            self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._unix.connect(path)
            except OSError as error:
                self._unix.close()
                raise ConnectionError(f"cannot connect to {address}: {error}; is the engine server running?") from error
            return
        self._zmq = zmq.Context.instance().socket(zmq.DEALER)
        self._zmq.setsockopt(zmq.LINGER, 0)
        self._zmq.connect(address)  # ZeroMQ connects in the background; a reply that never comes is the caller's timeout

    def send(self, data: bytes) -> None:
        if self._unix is not None:
            self._unix.sendall(len(data).to_bytes(4, "big") + data)
        else:
            self._zmq.send(data)

    def recv(self, timeout_ms: int) -> bytes | None:
        """The next frame, or None when none came within `timeout_ms`."""
        if self._unix is None:
            return self._zmq.recv() if self._zmq.poll(timeout_ms) else None
        deadline = time.monotonic() + timeout_ms / 1000
        while not self._frames:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._unix.settimeout(left)
            try:
                data = self._unix.recv(1 << 16)
            except TimeoutError:
                return None
            if not data:
                raise ConnectionError("the engine server closed the connection")
            self._inbox += data
            try:
                self._frames.extend(_cut_frames(self._inbox))
            except ValueError as error:
                raise ConnectionError(f"the engine server sent {error}") from error
        return self._frames.popleft()

    def close(self) -> None:
        if self._unix is not None:
            self._unix.close()
        else:
            self._zmq.close(linger=0)
