"""One small run of every command, made once per test process and shared: the report-page tests open their
pages, the strict-JSON tests parse their files and stdout (`--json`). Tests copy a folder before changing it."""

import pytest

# one small run per command (and per patching method); ablate masks all four retrieval heads of tiny-qwen2's
# key-value group, so recall goes 1 -> 0 on every prompt and the paired effect size is -inf (strict JSON: null)
RUNS = {
    "retrieval": ["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "256", "--depths", "0.25,0.75",
                  "--n-seeds", "2"],
    "ablate": ["ablate", "-m", "tiny-qwen2", "--heads", "L2H4,L2H5,L2H6,L2H7", "--lengths", "256", "--depths", "0.5",
               "--n-seeds", "2", "--draws", "1"],
    "ablate-curve": ["ablate", "-m", "tiny-qwen2", "--heads", "retrieval", "--curve", "keep", "--ks", "4,32",
                     "--lengths", "256", "--depths", "0.5", "--n-seeds", "2", "--draws", "1"],
    "rope-zero": ["rope-zero", "-m", "tiny-qwen2", "--heads", "L2H4", "--lengths", "256", "--depths", "0.5",
                  "--n-seeds", "2", "--dims", "0,8", "--random-draws", "1", "--head-draws", "1"],
    "rope-profile": ["rope-profile", "-m", "tiny-qwen2", "--heads", "L2H4", "--n-texts", "2", "--n-tokens", "64"],
    "induction": ["detect", "induction", "-m", "tiny-random-gpt2", "--copy-lengths", "6", "--n-seqs", "3", "--heads",
                  "L1H1", "--draws", "1", "--copy-tokens", "40", "--n-boot", "100"],
    "copy-suppression": ["detect", "copy-suppression", "-m", "tiny-qwen2", "--n-texts", "4", "--seq-len", "32",
                         "--circuit-tokens", "64", "--candidates", "1", "--n-boot", "50"],
    "patch": ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6", "--site",
              "resid_pre,head_out", "--n-boot", "50"],
    "patch-atp": ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6", "--site",
                  "head_out", "--method", "atp-qk", "--verify-top", "2", "--verify-sample", "2", "--n-boot", "50"],
    "patch-path": ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6",
                   "--method", "path", "--senders", "L0H0", "--via", "logits", "--n-boot", "50"],
    "probe": ["probe", "-m", "tiny-qwen2", "-n", "48", "--max-length", "32", "--no-heads"],
    "cache": ["cache", "-m", "tiny-qwen2", "-n", "4", "--max-length", "32"],
}


class _Cap:
    """run_cli's capsys for a session fixture: the process's real streams, captured by redirection."""

    def __init__(self):
        import io

        self.out, self.err = io.StringIO(), io.StringIO()

    def readouterr(self):
        o = type("O", (), {"out": self.out.getvalue(), "err": self.err.getvalue()})()
        self.out.seek(0), self.out.truncate(), self.err.seek(0), self.err.truncate()
        return o


@pytest.fixture(scope="session")
def cli_runs(tmp_path_factory):
    """{name: (run folder, stdout of `--json`)} for every command of RUNS, each run once."""
    import contextlib

    from tests.helpers import run_cli

    root = tmp_path_factory.mktemp("cli-runs")
    out = {}
    for name, args in RUNS.items():
        cap = _Cap()
        with contextlib.redirect_stdout(cap.out), contextlib.redirect_stderr(cap.err):
            code, stdout, err = run_cli(args + ["--out", str(root / name), "--json"], cap)
        if code != 0:
            pytest.fail(f"{name}: exit {code}: {err}")
        out[name] = (root / name, stdout)
    return out
