"""Fixtures for the transport tests: short ipc addresses and a log folder."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # ipc:// paths must fit in sockaddr_un (~107 bytes); pytest's tmp_path may not.
    path = Path(tempfile.mkdtemp(prefix="lgt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def address(short_dir: Path) -> str:
    return f"ipc://{short_dir}/rx.sock"


@pytest.fixture(autouse=True)
def _kill_leftover_processes() -> Iterator[None]:
    from .processes import STARTED

    yield
    while STARTED:
        STARTED.pop().kill()
