from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lego_rl.model.tiny import write_tiny_model


@pytest.fixture(scope="session")
def byte_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MoE (random init, seed 0) with the byte-level tokenizer, built once per session."""
    torch.set_num_threads(2)
    return write_tiny_model(tmp_path_factory.mktemp("tiny-bytes"), tokenizer="bytes", seed=0)
