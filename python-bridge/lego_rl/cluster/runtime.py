"""Joining or starting Ray: local on one machine by default, a cluster with an address."""

from __future__ import annotations

import os

import ray


def connect(address: str | None, *, num_cpus: int | None = None) -> None:
    """`address=None` starts a local Ray sized to this machine; otherwise joins that cluster."""
    if ray.is_initialized():
        return
    # Token auth is on by default in recent Ray; a local single-user instance does not need it.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=True)
