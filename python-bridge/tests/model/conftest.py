import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # The CI and dev machines have 2 shared cores. These tensors are tiny, so a second
    # intra-op thread gains nothing, and its parallel regions stall whenever the other
    # core is busy (measured: the suite runs ~2x faster with 1 thread under load).
    torch.set_num_threads(1)
