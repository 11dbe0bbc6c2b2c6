"""examples/inspect_batches.ipynb runs headless on batches the TS sender spooled."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from .processes import REPO, start_sender


@pytest.mark.slow
def test_the_inspection_notebook_runs_on_batches_the_ts_sender_spooled(short_dir: Path, address: str) -> None:
    spool = short_dir / "tx"
    # No receiver: the sender spools and keeps everything (the folder a notebook user would open).
    sender = start_sender(address, spool, short_dir, "--count", "12", "--per-batch", "5", "--id-prefix", "nb", "--no-drain")
    sender.wait_for(lambda e: e["type"] == "done")
    notebook = nbformat.read(REPO / "examples" / "inspect_batches.ipynb", as_version=4)
    os.environ["LEGO_SPOOL"] = str(spool)
    try:
        # kernel "python3" is the native kernel: this interpreter (the venv's) with its ipykernel.
        NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        del os.environ["LEGO_SPOOL"]
    outputs = "".join(
        out.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
    )
    assert "12 trajectories" in outputs
    assert "ok: 12 trajectories, 12 segments" in outputs
