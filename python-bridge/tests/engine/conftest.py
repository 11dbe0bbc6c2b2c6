from pathlib import Path

import pytest
import torch

from lego_rl.model import MoeForCausalLM, load_model
from lego_rl.model.tiny import write_tiny_model


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # The CI and dev machines have 2 shared cores. These tensors are tiny, so a second
    # intra-op thread gains nothing, and its parallel regions stall whenever the other
    # core is busy (measured: the suite runs ~2x faster with 1 thread under load).
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def byte_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-bytes"), tokenizer="bytes", seed=7)


@pytest.fixture(scope="session")
def byte_model(byte_model_dir: Path) -> MoeForCausalLM:
    return load_model(byte_model_dir).eval()
