"""fsync helpers for files that must survive a crash (spools, checkpoints).

A rename is durable only once the folder holding it is fsynced too, so every
"write, fsync, rename" in lego_rl ends with `fsync_dir` on the parent.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
