"""Fixtures every test folder shares (session-scoped: built once per test process) and the torch thread policy.

Markers (pyproject.toml): `real` (the fetched real checkpoints) and `slow` (the heavy tier: every architecture
of an equality that the fast tier checks on a few, subprocess runs, notebooks, the documentation's commands).
`make test-fast` leaves both out; `make test` (CI) runs everything.
"""

import os

import pytest
import torch

# one thread per test process under pytest-xdist (the workers share the cores), else up to two
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def one_thread():
    """torch on one thread for the test (the organism evaluations: deterministic and no oversubscription)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def one_blas_thread():
    """One BLAS and one torch thread: small matrices only lose from threading on busy CPUs."""
    from threadpoolctl import threadpool_limits

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tok():
    """The bundled organisms' tokenizer (data/organisms/tokenizer) as transformers loads it, once."""
    from transformers import AutoTokenizer

    from tests.helpers import ORGANISM_TOKENIZER

    return AutoTokenizer.from_pretrained(ORGANISM_TOKENIZER)


@pytest.fixture(scope="session")
def raw_tok():
    """The same tokenizer as the `tokenizers` object the organisms are trained with (encode(...).ids)."""
    from interp.organisms.train import get_tokenizer

    return get_tokenizer()


@pytest.fixture(scope="session")
def bundled():
    """`bundled(name)`: a bundled organism (tiny-qwen2, tiny-llama, tiny-gpt2) loaded once per test process.
    Shared: a test may add interventions only inside `model.intervene(...)` and must not change weights."""
    import interp

    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = interp.load_model(name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    """A tiny random Qwen2 checkpoint folder with the organisms' tokenizer (tests.helpers.make_checkpoint)."""
    from tests.helpers import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-a")


# The longest files first: under `pytest -n auto --dist loadfile` a file runs in one worker, and one that starts
# last would leave the other workers idle at the end. Order is otherwise as collected.
LONGEST_FIRST = ("tests/models/test_real_qwen.py", "tests/models/test_real_models.py", "tests/runtime/test_distributed.py", "tests/docs/test_notebooks.py",
                 "tests/docs/test_readme_examples.py", "tests/cli/test_batch_auto.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
