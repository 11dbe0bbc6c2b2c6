"""Trusted grading runner, copied root-owned into /grader of the grading container.

It runs the task's verifier (bash /tests/test.sh) as a child and reports a
verdict the child cannot forge:
  1. the nonce arrives on stdin (not argv or environ, which /proc exposes);
  2. the runner makes itself non-dumpable, so a same-uid child cannot open
     /proc/<runner>/fd/1 to write into the verdict stream;
  3. the child's output goes to a pipe and is re-emitted base64-encoded inside
     the one JSON verdict line, so nothing it prints can look like a verdict;
  4. pytest sessions report to the runner through the lego_verdict plugin
     (see lego_verdict.py); the verdict carries what they reported.
The reward is decided from the child's exit status and those reports, never
from a file.
"""
import base64
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

PR_SET_DUMPABLE = 4  # <linux/prctl.h>
CAP = 256 * 1024  # bytes of verifier output kept (tail)
MAX_SESSIONS = 8  # pytest sessions one verifier may start, each reads one token


def drain(fd: int, sink: list) -> None:
    with os.fdopen(fd, "rb") as f:
        for line in f:
            sink.append(line)


def main() -> None:
    nonce = sys.stdin.readline().strip()
    timeout_s = float(sys.argv[1])
    use_plugin = sys.argv[2] == "plugin"
    command = sys.argv[3:]
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    pass_fds = ()
    reports: list = []
    token = secrets.token_hex(16)
    if use_plugin:
        report_r, report_w = os.pipe()
        token_r, token_w = os.pipe()
        os.write(token_w, ((token + "\n") * MAX_SESSIONS).encode())
        os.close(token_w)
        env["PYTEST_ADDOPTS"] = "-p lego_verdict"
        env["LEGO_VERDICT_FDS"] = f"{report_w},{token_r}"
        pass_fds = (report_w, token_r)
        reader = threading.Thread(target=drain, args=(report_r, reports), daemon=True)
        reader.start()
    t0 = time.monotonic()
    child = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=env, cwd="/workspace", start_new_session=True, pass_fds=pass_fds,
    )
    if use_plugin:
        os.close(report_w)
        os.close(token_r)
    timed_out = False
    try:
        out, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
    # Leftover processes of the verifier must not outlive the verdict (nor hold the report pipe).
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if use_plugin:
        reader.join(timeout=5)
    sessions = finished = passed = failed = 0
    for line in reports:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("token") != token:
            continue
        ev = rec.get("event")
        if ev == "start":
            sessions += 1
        elif ev == "finish":
            finished += 1
            failed += rec.get("exitstatus") != 0
        elif ev == "test":
            # skipped (and xfail) tests count neither way
            if rec.get("outcome") == "passed":
                passed += 1
            elif rec.get("outcome") == "failed":
                failed += 1
    verdict = {
        "nonce": nonce,
        "exit": child.returncode,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - t0, 3),
        "pytest": {"sessions": sessions, "finished": finished, "passed": passed, "failed": failed},
        "log_b64": base64.b64encode(out[-CAP:]).decode(),
    }
    sys.stdout.write("\n" + json.dumps(verdict) + "\n")
    sys.stdout.flush()


main()
