import pytest

import interp


@pytest.fixture(autouse=True)
def _store_threads(one_blas_thread):
    """Every store test on one BLAS / torch thread."""
    yield


@pytest.fixture(scope="session")
def model(ckpt):
    """The `ckpt` checkpoint loaded once (the store tests cache and compare its activations)."""
    return interp.load_model(str(ckpt), device="cpu")
