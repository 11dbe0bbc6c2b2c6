"""Real processes for the transport tests: a TS sender (tsx) and a Python receiver.

Each process prints one JSON event per line; a reader thread queues them so a
test waits on an exact event with a deadline (never a sleep).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
TSX = REPO / "ts" / "node_modules" / ".bin" / "tsx"
SEND_FIXTURE = REPO / "ts" / "src" / "transport" / "fixtures" / "send-trajectories.ts"

Event = dict[str, Any]

# Every process a test starts, so a fixture can SIGKILL the survivors of a failed test.
STARTED: list[EventProcess] = []


class EventProcess:
    """A child process whose stdout is a stream of JSON events."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.events: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._stderr = open(log_dir / f"{name}-{time.time_ns()}.stderr", "w+")
        # Own process group: tsx runs the script in a child node process, and a
        # SIGKILL must reach that child too (killing only tsx would orphan it).
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, cwd=REPO, start_new_session=True
        )
        STARTED.append(self)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def wait_for(self, matches: Callable[[Event], bool], timeout_s: float = 60.0) -> Event:
        """Returns the first event (seen or to come) that `matches`; fails at the deadline or on exit."""
        for event in self.events:
            if matches(event):
                return event
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                event = self._queue.get(timeout=max(0.0, left))
            except queue.Empty:
                raise AssertionError(f"{self.name}: no matching event within {timeout_s} s; stderr:\n{self.stderr()}") from None
            if event is None:
                raise AssertionError(f"{self.name} exited ({self.proc.wait()}) before a matching event; last events {self.events[-6:]}; stderr:\n{self.stderr()}")
            self.events.append(event)
            if matches(event):
                return event

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.get("type") == kind)

    def stderr(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-4000:]

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up (the fault under test)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self._drain()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        self._drain()
        return code

    def _drain(self) -> None:
        """After exit: every line printed becomes an event in `events`."""
        self._thread.join(timeout=10)
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            if event is not None:
                self.events.append(event)

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_receiver(address: str, spool: Path, log_dir: Path, *extra: str) -> EventProcess:
    argv = [sys.executable, "-m", "lego_rl.transport", "receive", "--bind", address, "--spool", str(spool), *extra]
    rx = EventProcess("receiver", argv, log_dir)
    rx.wait_for(lambda e: e["type"] == "listening", timeout_s=30)
    return rx


def start_sender(address: str, spool: Path, log_dir: Path, *extra: str) -> EventProcess:
    argv = [str(TSX), str(SEND_FIXTURE), "--to", address, "--spool", str(spool), *extra]
    return EventProcess("sender", argv, log_dir)


def spool_trajectory_ids(spool: Path) -> list[str]:
    """Every trajectory id in a receiver spool, with repeats (the exactly-once count)."""
    from lego_rl.jupyter import open_spool

    return open_spool(spool).column("trajectory_id").to_pylist()
