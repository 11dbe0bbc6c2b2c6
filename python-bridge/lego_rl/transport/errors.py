"""Typed errors of the transport; each names the batch, file or address concerned."""

from __future__ import annotations

from pathlib import Path


class TransportError(RuntimeError):
    """Base of every transport failure."""


class SpoolFormatError(TransportError):
    """A spool file is missing, truncated or not in the LGRB layout."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"spool file {path}: {detail}")
        self.path = path


class TapTimeoutError(TransportError):
    """A tap saw fewer batches than asked for before its deadline."""
