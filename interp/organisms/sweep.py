"""Variant builds of one organism recipe that differ in one setting (rope_theta) and training seed only.

A `Variant` is (base organism, rope_theta, seed): the base's v2 recipe with those two fields overridden. Builds
live under `BUILDS_DIR/<name>` (`data/organisms/theta/tiny-llama-theta1000-seed2`); the variant that equals a
bundled organism's config (tiny-llama is theta 1e4, seed 2) is that organism, not a copy. `build_missing`
trains the variants not built yet, `parallel` at a time on one thread each, each into `<name>.partial` renamed
when its card is written, so an interrupted build never looks finished.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from interp.organisms.train import DATA_DIR, INFO_FILE, OrganismConfig, config_with

BUILDS_DIR = DATA_DIR / "theta"
DEFAULT_BASE = "tiny-llama"
DEFAULT_THETAS = (1e3, 1e4, 5e5)
DEFAULT_SEEDS = (2, 3)
ROTARY_ARCHS = ("llama", "qwen2")  # the organism archs whose positions are rotary (rope_theta applies)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Variant:
    """One build of the sweep: organism `base`'s v2 recipe with `rope_theta` and the training `seed` set."""

    base: str
    rope_theta: float
    seed: int

    @property
    def name(self) -> str:
        """The build folder's name, e.g. tiny-llama-theta500000-seed3."""
        return f"{self.base}-theta{_num(self.rope_theta)}-seed{self.seed}"

    @property
    def overrides(self) -> list[str]:
        """The `--set FIELD=VALUE` overrides of the build command."""
        return [f"rope_theta={_num(self.rope_theta)}", f"seed={self.seed}"]

    def config(self) -> OrganismConfig:
        """The full organism config of this variant. A base without rotary positions (arch gpt2: learned
        absolute positions) is a ValueError: rope_theta would be set and mean nothing."""
        cfg = config_with(self.base, self.overrides)
        if cfg.arch not in ROTARY_ARCHS:
            raise ValueError(f"{self.base} has no rotary position embedding (arch {cfg.arch}: learned absolute "
                             f"positions), so rope_theta means nothing there; sweep an organism with RoPE "
                             f"(--base tiny-llama or tiny-qwen2)")
        return cfg

    def build_argv(self, out: Path, steps: int | None = None) -> list[str]:
        """The build command (`steps`: truncate the curriculum, for smoke tests)."""
        args = ["build", self.base]
        for o in self.overrides:
            args += ["--set", o]
        args += ["--steps", str(steps)] if steps else []
        return [sys.executable, "-m", "interp.organisms", *args, "--threads", "1", "--out", str(out)]


def variant_grid(base: str = DEFAULT_BASE, thetas: Sequence[float] = DEFAULT_THETAS,
         seeds: Sequence[int] = DEFAULT_SEEDS) -> list[Variant]:
    """Every (theta, seed) variant of `base`, theta-major. Unknown bases and bad values fail here."""
    out = [Variant(base, float(t), int(s)) for t in thetas for s in seeds]
    for v in out:
        v.config()  # an unknown base or a value the field refuses raises before anything is built
    return out


def _card(path: Path) -> dict:
    try:
        return json.loads((path / INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _same_config(card: dict, cfg: OrganismConfig) -> bool:
    want = json.loads(json.dumps(asdict(cfg)))  # tuples as lists, as in the saved card
    return card.get("config") == want


def _complete(card: dict, cfg: OrganismConfig) -> bool:
    """Trained for the whole curriculum (a `--steps` smoke build has the config but not the steps)."""
    return card.get("training", {}).get("steps") == cfg.total_steps


def locate_build(variant: Variant, builds_dir: str | Path = BUILDS_DIR) -> Path | None:
    """The finished build of `variant`: `builds_dir/<name>` (its card's config must be the variant's), else the
    bundled organism whose config it is. None when not built."""
    cfg = variant.config()
    path = Path(builds_dir) / variant.name
    if (path / "model.safetensors").is_file():
        card = _card(path)
        if not _same_config(card, cfg):
            raise ValueError(f"{path} holds a build whose config differs from {variant.name}'s; move it away "
                             "or pass another --builds folder")
        if not _complete(card, cfg):
            raise ValueError(f"{path} was trained for {card.get('training', {}).get('steps')} of the recipe's "
                             f"{cfg.total_steps} steps (a truncated build); delete it to rebuild")
        return path
    bundled = DATA_DIR / variant.base
    card = _card(bundled) if (bundled / "model.safetensors").is_file() else {}
    if _same_config(card, cfg) and _complete(card, cfg):
        return bundled
    return None


def build_missing(variants: Sequence[Variant], builds_dir: str | Path = BUILDS_DIR, parallel: int = 2,
                  log: Callable[[str], None] = print, steps: int | None = None) -> dict[str, Path]:
    """Train every variant without a finished build, `parallel` processes at a time (one thread each).
    Returns {name: build folder} of every variant. A failed build raises after the others finish.
    `steps`: truncate each curriculum (smoke tests; the build is not the variant's full recipe)."""
    builds_dir = Path(builds_dir)
    found = {v.name: locate_build(v, builds_dir) for v in variants}
    todo = [v for v in variants if found[v.name] is None]
    running: list[tuple[Variant, subprocess.Popen, Path, float, object]] = []
    failed = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    builds_dir.mkdir(parents=True, exist_ok=True)
    while todo or running:
        while todo and len(running) < max(1, parallel):
            v = todo.pop(0)
            tmp = builds_dir / f"{v.name}.partial"
            shutil.rmtree(tmp, ignore_errors=True)  # an interrupted earlier build of this variant
            argv = v.build_argv(tmp, steps)
            log(f"building {v.name}: {shlex.join(argv[1:])}  (log: {tmp}.log)")
            logf = open(f"{tmp}.log", "w")
            running.append((v, subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=env), tmp,
                            time.time(), logf))
        time.sleep(1 if steps else 10)
        for item in list(running):
            v, proc, tmp, t0, logf = item
            if proc.poll() is None:
                continue
            running.remove(item)
            logf.close()
            if proc.returncode != 0 or not (tmp / "model.safetensors").is_file():
                failed.append(f"{v.name} (exit {proc.returncode}; see {tmp}.log)")
                continue
            final = builds_dir / v.name
            tmp.rename(final)
            found[v.name] = final
            log(f"built {v.name} in {time.time() - t0:.0f} s -> {final}")
    if failed:
        raise RuntimeError("builds failed: " + "; ".join(failed))
    return found
