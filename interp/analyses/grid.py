"""A head experiment's inputs decided before the model loads, next to the pipeline that runs it: `--heads
retrieval|induction --from DIR` read once (`saved_detection`), the NIAH grid a saved retrieval detection ran on
taken for the options not given (`inherit_grid`, so heads are selected and tested on the same prompts), and a
paired experiment's grid checked for >= 2 prompts (`experiment_grid`). `pipeline.prepare_experiment` takes the
SavedDetection as its `from_dir`."""

from __future__ import annotations

from dataclasses import replace

from interp.analyses.heads import SavedDetection
from interp.errors import InvalidInputError

FLAGS = {"lengths": "--lengths", "depths": "--depths", "seeds": "--n-seeds"}  # the grid's options, by name


def saved_detection(heads: str, from_dir) -> SavedDetection | None:
    """`from_dir` read once, before the model loads (a missing or broken file fails first): a SavedDetection for
    heads "retrieval" / "induction", else None."""
    if not from_dir or heads not in ("retrieval", "induction"):
        return None
    return SavedDetection.read(from_dir, heads)


def _texts(niah) -> dict:
    return {"lengths": ",".join(map(str, niah.context_lengths)), "depths": ",".join(f"{d:g}" for d in niah.depths),
            "seeds": niah.n_seeds}


def inherit_grid(niah, saved: SavedDetection | None, given=()) -> tuple[object, list[str]]:
    """(the NiahConfig to use, notes): with a saved retrieval detection, its context lengths, depths and seeds for
    those of "lengths" / "depths" / "seeds" not in `given` (the options the user set); a note says which were
    taken, and one names the options given that differ from the detection's."""
    g = saved.niah_grid() if saved is not None and saved.kind == "retrieval" else None
    if g is None:
        return niah, []
    det = {"lengths": ",".join(map(str, g["context_lengths"])), "depths": ",".join(f"{d:g}" for d in g["depths"]),
           "seeds": g["n_seeds"]}
    taken = [k for k in FLAGS if k not in given]
    fields = {"lengths": ("context_lengths", tuple(g["context_lengths"])), "depths": ("depths", tuple(g["depths"])),
              "seeds": ("n_seeds", g["n_seeds"])}
    niah = replace(niah, **dict(fields[k] for k in taken))
    now = _texts(niah)
    differ = [f"{FLAGS[k]} {now[k]} (detected on {det[k]})" for k in FLAGS if k not in taken and str(now[k]) != str(det[k])]
    notes = []
    if taken:
        notes.append(f"NIAH grid from {saved.path}: " + ", ".join(f"{FLAGS[k]} {now[k]}" for k in taken)
                     + " (the detection's prompts: heads are selected and tested on the same seeds)")
    if differ:
        notes.append("not the detection's grid: " + "; ".join(differ))
    return niah, notes


def check_paired(niah) -> None:
    """A paired experiment (conditions compared prompt by prompt) needs >= 2 NIAH prompts."""
    n = len(niah.context_lengths) * len(niah.depths) * niah.n_seeds
    if n < 2:
        raise InvalidInputError(f"the NIAH grid has {n} prompt: paired comparisons need at least 2 (raise --n-seeds, "
                                "or add --lengths/--depths)")


def experiment_grid(niah, saved: SavedDetection | None, given=(), prompts: bool = False) -> tuple[object, list[str]]:
    """(NiahConfig, notes) of a paired experiment: the detection's grid where not given (`inherit_grid`) and >= 2
    prompts, unless `prompts` (a PromptTask replaces NIAH: the grid is only a detection's, taken as given)."""
    if prompts:
        return niah, []
    niah, notes = inherit_grid(niah, saved, given)
    check_paired(niah)
    return niah, notes
