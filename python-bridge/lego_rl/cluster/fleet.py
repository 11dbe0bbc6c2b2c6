"""`python -m lego_rl.cluster.fleet -- ROLLOUT-ARGS`: a supervised `lego rollout` worker on every Ray node that has none.

Joins the Ray cluster (`--ray-address`, or starts a local one), starts one
RolloutWorkerSupervisor per live node without one yet (rollout_fleet.py; the nodes
where a job's own fleet or an earlier fleet runs are left alone), each running
`lego rollout ROLLOUT-ARGS --producer-id ID-i --spool-dir SPOOL_ROOT/ID-i`, prints
each node's health as a JSON line every `--report-s` seconds, and exits 0 once every
worker finished (1 when one failed past its restarts or the time ran out). In the same
Ray job as `python -m lego_rl.cluster.train --receive …`, that is the whole loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ray

from ..entry import run_entry
from .rollout_fleet import DEFAULT_LEGO, fleet_specs, nodes_with_a_worker, start_rollout_fleet
from .runtime import connect


def main(argv: list[str]) -> int:
    own, rollout_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="python -m lego_rl.cluster.fleet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ray-address", default=None, help="join this Ray cluster (default: a local Ray)")
    p.add_argument("--lego", default=str(DEFAULT_LEGO), help="the lego entry point on every node (default: this checkout's)")
    p.add_argument("--producer-id", default="rollout", help="worker i is PRODUCER_ID-i")
    p.add_argument("--spool-root", required=True, help="each worker's spool and run journal is SPOOL_ROOT/PRODUCER_ID-i (node-local)")
    p.add_argument("--max-restarts", type=int, default=20)
    p.add_argument("--cpus", type=float, default=1, help="Ray CPUs each supervisor holds")
    p.add_argument("--timeout-s", type=float, default=24 * 3600)
    p.add_argument("--report-s", type=float, default=30)
    a = p.parse_args(own)
    if not rollout_args:
        p.error("give the `lego rollout` arguments after --")
    if any(x in rollout_args for x in ("--producer-id", "--spool-dir")):
        p.error("--producer-id and --spool-dir are set per worker by the fleet; pass --producer-id/--spool-root before --")
    connect(a.ray_address)
    busy = nodes_with_a_worker()
    free = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] not in busy)
    if not free:
        raise SystemExit(f"python -m lego_rl.cluster.fleet: every live Ray node ({len(busy)}) already runs a rollout worker: "
                         "join the new machines to the cluster first (ray start --address HEAD:6379)")
    specs = fleet_specs(a.lego, rollout_args, producer_id=a.producer_id, spool_root=a.spool_root, max_restarts=a.max_restarts,
                        nodes=free)
    actors = start_rollout_fleet(specs, cpus=a.cpus, named=True)
    deadline = time.monotonic() + a.timeout_s
    while True:
        health = ray.get([actor.health.remote() for actor in actors.values()])
        for node, h in zip(actors, health):
            print(json.dumps({"event": "worker_health", "node_id": node, **h}), flush=True)
        if all(h["state"] in ("finished", "failed", "stopped") for h in health):
            return 0 if all(h["state"] == "finished" for h in health) else 1
        if time.monotonic() > deadline:
            ray.get([actor.stop.remote() for actor in actors.values()])
            return 1
        ray.get([actor.wait.remote(a.report_s) for actor in actors.values()])


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.cluster.fleet"))
