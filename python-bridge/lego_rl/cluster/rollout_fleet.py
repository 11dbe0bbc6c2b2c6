"""The rollout fleet on Ray: one supervisor actor per node runs a `lego rollout` worker there.

Each `RolloutWorkerSupervisor` starts `lego rollout ARGS` as a child process (its own
process group), reads its JSON lines for health, and restarts it when it dies (any exit
but 0: killed, crashed) with doubling back-off, up to `max_restarts`. A restart runs the
same command line, so the same spool dir and producer id: the worker's run journal
(ts/src/rollout/journal.ts) resumes its run, skipping the groups it shipped. Exit 0 means
the run finished; the supervisor then stops restarting and keeps the summary.

Rollout workers need Docker and the checkout on their node, not GPUs; the actor asks Ray
for `cpus` (default 1) so that placement follows the nodes' CPU resources, and is pinned
to its node (NodeAffinitySchedulingStrategy) so a Ray restart of the actor never moves a
worker away from its Docker daemon and spool.

`stop()` sends SIGTERM (the worker ends its rollouts in flight, removes its containers and
exits; ts/src/rollout/cli.ts) and SIGKILLs the process group only after `stop_grace_s`. A
worker whose supervisor dies (its job ended, its node's raylet went) gets SIGTERM from the
kernel (PR_SET_PDEATHSIG, set by util-linux setpriv), so it never outlives the job
unsupervised. The last lines of
the worker's stderr are kept for `health()`, so a failure can say why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@dataclass(frozen=True)
class RolloutWorkerSpec:
    """What one supervisor runs: `LEGO rollout ARGS`, and how it restarts it."""

    lego: str
    args: tuple[str, ...]
    max_restarts: int = 20
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    log_dir: str | None = None
    """Keep each run's stderr in LOG_DIR/rollout-<restart>.log (its tail is kept in health() either way)."""
    stop_grace_s: float = 60.0
    """After stop()'s SIGTERM, how long the worker gets to end its rollouts and remove its containers before SIGKILL."""


DEFAULT_LEGO = Path(__file__).resolve().parents[3] / "ts" / "bin" / "lego"
"""This checkout's `lego` entry point (the same path on every node of a cluster set up alike)."""

STOPPED_EXIT_CODE = 143
"""What `lego rollout` exits with once SIGTERM has stopped it cleanly (STOPPED_EXIT_CODE in ts/src/rollout/cli.ts)."""

PIPE_DRAIN_S = 10.0
"""After the worker exits, how long its last lines (the summary) may take to be read before the exit is reported."""

STDERR_TAIL_LINES = 20
"""Lines of the worker's stderr kept for health(): enough for the error it died of."""


# util-linux's setpriv sets the child's parent-death signal (prctl PR_SET_PDEATHSIG) and execs the worker: a
# preexec_fn doing the same deadlocked in the forked child of the threaded actor process (seen here), as
# Python's docs warn. Absent (not Linux): the worker is not told when its supervisor dies.
_SETPRIV = shutil.which("setpriv")


def _command(spec: RolloutWorkerSpec) -> list[str]:
    """`lego rollout ARGS`, under setpriv so it gets SIGTERM when the supervisor's thread that started it goes."""
    command = [spec.lego, "rollout", *spec.args]
    return [_SETPRIV, "--pdeathsig", "TERM", "--", *command] if _SETPRIV else command


class RolloutWorkerSupervisor:
    """Runs and restarts one `lego rollout` worker on this node; `health()` says how it is doing."""

    def __init__(self, spec: RolloutWorkerSpec) -> None:
        if spec.max_restarts < 0 or spec.backoff_s < 0:
            raise ValueError("max_restarts and backoff_s must be >= 0")
        self._spec = spec
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._state = "starting"
        self._restarts = 0
        self._exits: list[int] = []
        self._pids: list[int] = []
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._groups_shipped = 0
        self._rollouts_finished = 0
        self._last_line_at: float | None = None
        self._summary: dict[str, Any] | None = None
        self._stop_s: float | None = None
        self._started_at = time.time()
        self._thread = threading.Thread(target=self._run, name="rollout-supervisor", daemon=True)
        self._thread.start()

    def health(self) -> dict[str, Any]:
        """State (running, restarting, finished, failed, stopped), the child's pid, restarts, exit codes, progress;
        `stop_s`: how long the worker took to exit after stop()'s SIGTERM (its grace included, when it ran out)."""
        with self._lock:
            proc = self._proc
            return {
                "node": ray.util.get_node_ip_address(),
                "state": self._state,
                "pid": proc.pid if proc is not None and proc.poll() is None else None,
                "pids": list(self._pids),
                "restarts": self._restarts,
                "exit_codes": list(self._exits),
                "stderr_tail": list(self._stderr_tail),
                "groups_shipped": self._groups_shipped,
                "rollouts_finished": self._rollouts_finished,
                "seconds_since_last_line": None if self._last_line_at is None else time.time() - self._last_line_at,
                "uptime_s": time.time() - self._started_at,
                "summary": self._summary,
                "stop_s": self._stop_s,
            }

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """Health once the worker finished, failed or was stopped, or after `timeout_s`."""
        self._thread.join(timeout_s)
        return self.health()

    def stop(self) -> dict[str, Any]:
        """Stops restarting and the worker: SIGTERM to its process group, SIGKILL after `stop_grace_s`."""
        with self._lock:  # under the lock: a worker starting now either sees the stop or is signalled below
            self._stop.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            signalled = time.monotonic()
            self._signal(proc, signal.SIGTERM)
            try:
                proc.wait(self._spec.stop_grace_s)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)  # its containers go to the next run's reaper (dead pid)
            with self._lock:
                self._stop_s = time.monotonic() - signalled
        self._thread.join(60)
        return self.health()

    @staticmethod
    def _signal(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # exited between the check and the signal
            pass

    def _run(self) -> None:
        backoff = self._spec.backoff_s
        while not self._stop.is_set():
            code = self._run_once()
            with self._lock:
                if code is not None:
                    self._exits.append(code)
                if self._stop.is_set():
                    self._state = "stopped"
                    return
                if code == 0:
                    self._state = "finished"
                    return
                if self._restarts >= self._spec.max_restarts:
                    self._state = "failed"
                    return
                self._state = "restarting"
                self._restarts += 1
            # Back-off between restarts: a worker that dies at once (bad flags, Docker away) must not spin.
            if self._stop.wait(backoff):
                with self._lock:
                    self._state = "stopped"
                return
            backoff = min(backoff * 2, self._spec.max_backoff_s)

    def _run_once(self) -> int | None:
        """The worker's exit status, or None when stop() came first and it was never started."""
        log = None
        if self._spec.log_dir:
            Path(self._spec.log_dir).mkdir(parents=True, exist_ok=True)
            # Line-buffered: a process the worker left holding stderr keeps the reader (and its close) from the end.
            log = open(Path(self._spec.log_dir) / f"rollout-{self._restarts}.log", "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed by _read_stderr or below
        # Started under the lock that stop() takes: a stop between this thread's loop check and the start would
        # otherwise find no process to signal, and the worker would run on after stop() returned (seen in CI).
        with self._lock:
            if self._stop.is_set():
                if log is not None:
                    log.close()
                return None
            try:
                # errors="replace": a stray byte that is not UTF-8 must not end a reader thread (and its health lines).
                proc = subprocess.Popen(_command(self._spec), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
            except OSError as error:
                self._stderr_tail.append(f"cannot start {self._spec.lego}: {error}")
                if log is not None:
                    log.close()
                return 127
            self._proc = proc
            self._pids.append(proc.pid)
            self._state = "running"
        # Both pipes on threads of their own, and the exit waited for here: a full stderr pipe would block the
        # worker, and a process the worker left behind holding its stdout must not keep this thread (and stop())
        # from seeing the exit.
        readers = [threading.Thread(target=self._read_stdout, args=(proc,), name="rollout-stdout", daemon=True),
                   threading.Thread(target=self._read_stderr, args=(proc, log), name="rollout-stderr", daemon=True)]
        for reader in readers:
            reader.start()
        code = proc.wait()
        drained_by = time.monotonic() + PIPE_DRAIN_S
        for reader in readers:
            reader.join(max(0.0, drained_by - time.monotonic()))
        return code

    def _read_stdout(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._seen(line)

    def _read_stderr(self, proc: subprocess.Popen[str], log: Any) -> None:
        """Keeps the tail for health() and, with a log_dir, the whole stream; closes the log at the stream's end."""
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                if log is not None:
                    log.write(line)
                if line.strip():
                    with self._lock:  # health() copies the tail under the same lock
                        self._stderr_tail.append(line.rstrip()[:500])
        finally:
            if log is not None:
                log.close()

    def _seen(self, line: str) -> None:
        if not line.startswith("{"):
            return
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return
        with self._lock:
            self._last_line_at = time.time()
            kind = event.get("event")
            if kind == "group_shipped":
                self._groups_shipped += 1
            elif kind == "rollout_finished":
                self._rollouts_finished += 1
            elif kind == "summary":
                self._summary = event


# Threaded, so health() answers while wait() blocks.
RolloutWorkerActor = ray.remote(max_concurrency=4)(RolloutWorkerSupervisor)


SUPERVISOR_NAMESPACE = "lego-rl"
"""Ray namespace of named supervisors: the same for every job on a cluster, so each sees the others'."""


def supervisor_name(node: str) -> str:
    """The name a fleet's supervisor on `node` registers: one rollout worker per node across every job."""
    return f"rollout-worker-{node}"


def nodes_with_a_worker() -> set[str]:
    """Node ids whose named supervisor is alive (started by a job's fleet or `python -m lego_rl.cluster.fleet`)."""
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == SUPERVISOR_NAMESPACE}
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive") and supervisor_name(n["NodeID"]) in names}


def start_rollout_fleet(specs: dict[str, RolloutWorkerSpec], *, cpus: float = 1, named: bool = False) -> dict[str, Any]:
    """One supervisor per node: `specs` maps a Ray node id to what runs there; returns node id -> actor handle.

    `named`: each registers `supervisor_name(node)` in SUPERVISOR_NAMESPACE (a node that has one already is an
    error), so a later `python -m lego_rl.cluster.fleet` adds workers only where none runs.
    """
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    unknown = set(specs) - alive
    if unknown:
        raise ValueError(f"no live Ray node with id {sorted(unknown)}")
    if named and (busy := set(specs) & nodes_with_a_worker()):
        raise ValueError(f"Ray node(s) {sorted(busy)} already run a rollout worker (another job's fleet?)")
    names = ({"name": supervisor_name(node), "namespace": SUPERVISOR_NAMESPACE} if named else {} for node in specs)
    return {
        node: RolloutWorkerActor.options(
            num_cpus=cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False), **name,
        ).remote(spec)
        for (node, spec), name in zip(specs.items(), names)
    }


def fleet_specs(lego: str, args: list[str], *, producer_id: str, spool_root: str, nodes: list[str] | None = None,
                **spec_options: Any) -> dict[str, RolloutWorkerSpec]:
    """The same `lego rollout` command on every (or the given) live node, each with its own producer id and spool."""
    node_ids = nodes if nodes is not None else sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    return {
        node: RolloutWorkerSpec(
            lego=lego,
            args=(*args, "--producer-id", f"{producer_id}-{i}", "--spool-dir", str(Path(spool_root) / f"{producer_id}-{i}")),
            **spec_options,
        )
        for i, node in enumerate(node_ids)
    }
