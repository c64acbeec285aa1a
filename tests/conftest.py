import os

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def one_thread():
    """torch on one thread for the test (the organism evaluations: deterministic and no oversubscription)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)



def pytest_collection_modifyitems(config, items):
    if os.environ.get("INTERP_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow test: set INTERP_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
