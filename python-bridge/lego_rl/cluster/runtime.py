"""Joining or starting Ray: local on one machine by default, a cluster with an address."""

from __future__ import annotations

import os

import ray

from ..trainer import HardwareConfig


def connect(address: str | None, *, num_cpus: int | None = None) -> None:
    """`address=None` starts a local Ray sized to this machine; otherwise joins that cluster."""
    if ray.is_initialized():
        return
    if address:
        # A remote cluster keeps whatever authentication its operator configured.
        ray.init(address=address, log_to_driver=True)
    else:
        # Token auth is on by default in recent Ray; a local single-user instance that this
        # process starts itself does not need it. Never switched off when joining a cluster.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=True)


def require_declared_gpus(hardware: HardwareConfig) -> None:
    """Refuse a cluster with fewer GPUs than the job's [hardware] table declares (what `lego check --config`
    planned for): better one line now than placement groups that wait forever."""
    declared = (hardware.nodes or 0) * hardware.gpus_per_node
    present = ray.cluster_resources().get("GPU", 0)
    if declared and present < declared:
        raise SystemExit(f"the job's [hardware] declares {hardware.nodes} node(s) x {hardware.gpus_per_node} GPU = {declared} GPUs; "
                         f"this Ray cluster has {present:g}: join the right cluster (--ray-address) or fix [hardware]")
