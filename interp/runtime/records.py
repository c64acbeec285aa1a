"""One record per analysis: the one list every registry of analyses derives from.

A `Record` says what an analysis is called (its result kind), which CLI commands run it, the result file it
writes, its result class (`to_dict` / `from_dict` / `to_frame`), its config and run function, its figures,
how its report page picks the headline rows, the fields its result file must hold, and the memory profile
the planner uses for its forward passes. The records are plain data: the code they name (classes, functions,
CLI commands) is named by dotted path and imported on first use (`resolve`), as the package face does, so
every floor can read them and none of them imports upward. Derived from them: the report's result files,
fields, headlines and figures (`interp.figures.report`), the planner's analyses (`interp.models.memory`), the
CLI's commands and old option names (`interp.cli`), and the analyses' names on the package face (`interp`).

`load_result(path)` reads a run folder (or one result file) back into its result object.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Memory:
    """What the memory planner assumes of an analysis's forward passes (`interp plan --analysis NAME`): which
    logits a forward keeps ("all", "last", "none"), whether attention rows are recorded, the sites whose
    activations are held (patching's clean caches, the store's batch)."""

    name: str
    logits: str
    rows: bool
    sites: tuple = ()


DETECT = Memory("detect", "last", True)  # greedy_decode's prefill keeps the last logits only; rows recorded
ABLATE = Memory("ablate", "last", False)  # NIAH decoding; --prompts scoring plans logits="all"
PATCH = Memory("patch", "last", False, ("resid_pre",))
CACHE = Memory("cache", "none", False, ("resid",))  # activations into a store; no logits

# what a result file must hold for its page (the fields its figures and headline read), by JSON type
NUM, STR, LIST, OBJ = (int, float), str, list, dict


@dataclass(frozen=True)
class Record:
    """One analysis. `name`: the analysis and its result kind; `commands`: each CLI command that runs it ->
    the typer function (dotted path; None: a command registered elsewhere, e.g. `organisms sweep`); `file`:
    the result file's stem (`<file>.json`, `<file>.csv`; None: no result file, e.g. `cache` writes a store);
    `result` / `config` / `run`: dotted paths of its result class, config class and entry function; `figures`:
    result dict -> {figure stem: figure}; `headline`: how the report page picks its first rows ("heads": the top
    heads by `primary`, "cells": the largest cells of each grid site, "metric": the rows of the result's
    metric, None: the first rows); `fields`: what the result file must hold, by JSON type; `memory`: the
    planner's profile of its forward passes; `page`: where its section stands on a report page (a run's own
    detection last); `examples`: per command, command lines for its --help that run as written on the bundled
    models (a command two records share lists each record's own)."""

    name: str
    commands: dict
    file: str | None
    result: str | None
    config: str | None = None
    run: str | None = None
    figures: str | None = None
    headline: str | None = None
    primary: str | None = None
    fields: dict = field(default_factory=dict)
    memory: Memory | None = None
    page: int = 0
    examples: dict = field(default_factory=dict)

    def result_class(self):
        """The result class (imported now)."""
        return resolve(self.result)


_CLI = "interp.cli."
RECORDS = (
    Record("retrieval", {"detect retrieval": _CLI + "retrieval_cmds.detect_retrieval"}, "retrieval",
           "interp.analyses.retrieval.RetrievalResult", "interp.analyses.retrieval.RetrievalConfig",
           "interp.analyses.retrieval.detect_retrieval_heads", "interp.figures.experiments.retrieval_figures",
           "heads", "retrieval_score",
           {"model": STR, "scores": LIST, "heads": LIST, "threshold": NUM, "streaming": LIST, "sweep": LIST},
           DETECT, 12,
           examples={"detect retrieval": ("interp detect retrieval --model tiny-qwen2 --lengths 512,1024 --out runs/ret",
                                 "interp detect retrieval --haystack essay.txt --needles needles.jsonl --n-seeds 8",
                                 "interp detect retrieval --model smollm2-135m --haystack sherlock-holmes --needles standard",
                                 "interp detect retrieval --model smollm2-135m --haystack sherlock-holmes --model-dtype auto",
                                 "interp detect retrieval --model qwen2.5-7b --haystack essays/ --lengths 4096,8192",
                                 "interp detect retrieval --needles repeat-the-needle.jsonl --score-norm needle")}),
    Record("induction", {"detect induction": _CLI + "head_cmds.detect_induction"}, "induction",
           "interp.analyses.induction.InductionResult", "interp.analyses.induction.InductionConfig",
           "interp.analyses.induction.detect_induction_heads", "interp.figures.heads.induction_figures",
           "heads", "induction",
           {"model": STR, "scores": OBJ, "induction_heads": LIST, "prev_token_heads": LIST}, ABLATE, 8,
           examples={"detect induction": ("interp detect induction --model tiny-llama --copy-lengths 50 --n-seqs 32",
                                                   "interp detect induction --model tiny-gpt2 --sweep --out runs/ind")}),
    Record("copy_suppression", {"detect copy-suppression": _CLI + "head_cmds.detect_copy_suppression_cmd"},
           "copy_suppression", "interp.analyses.copy_suppression.CopySuppressionResult",
           "interp.analyses.copy_suppression.CopySuppressionConfig",
           "interp.analyses.copy_suppression.detect_copy_suppression", "interp.figures.heads.copy_suppression_figures",
           "heads", "ov_suppression",
           {"model": STR, "scores": OBJ, "copy_suppression_heads": LIST, "candidates": LIST}, ABLATE, 9,
           examples={"detect copy-suppression": ("interp detect copy-suppression --model tiny-qwen2 --n-texts 64 --seq-len 128",
                                                         "interp detect copy-suppression --texts docs.txt --candidates 3")}),
    Record("streaming", {"detect streaming": _CLI + "streaming_cmds.detect_streaming"}, "streaming",
           "interp.analyses.streaming.StreamingResult", "interp.analyses.streaming.StreamingConfig",
           "interp.analyses.streaming.run_streaming_scan", "interp.figures.experiments.streaming_figures",
           None, "necessity",
           {"model": STR, "scores": LIST, "labels": LIST, "counts": OBJ, "unit": STR, "window": NUM, "sinks": NUM},
           ABLATE, 3,
           examples={"detect streaming": (
               "interp detect streaming --model tiny-qwen2 --lengths 512 --depths 0.1,0.3,0.5 --n-seeds 2",
               "interp detect streaming --model smollm2-135m --haystack sherlock-holmes --needles standard "
               "--lengths 2048 --window 256 --from runs/ret",
               "interp detect streaming --model qwen2.5-7b --by-group --lengths 8192 --model-dtype auto")}),
    Record("ablation", {"ablate": _CLI + "ablate_cmds.ablate", "rope-remap": _CLI + "remap_cmds.rope_remap"},
           "ablation", "interp.analyses.ablation.AblationResult", "interp.analyses.ablation.AblationConfig",
           "interp.analyses.ablation.run_ablation", "interp.figures.experiments.ablation_figures", "metric", None,
           {"model": STR, "metric": STR, "mode": STR, "conditions": LIST}, ABLATE, 1,
           examples={"ablate": ("interp ablate --heads retrieval --random-pool any --out runs/demo",
                                 "interp ablate --heads retrieval --from runs/ret --draws 5 --random-pool any",
                                 "interp ablate --heads L2H4,L2H5 --prompts prompts.jsonl --metric logit_diff --csv",
                                 "interp ablate --model qwen2.5-7b --heads retrieval --lengths 32768 --batch-size auto",
                                 "interp ablate --model tiny-qwen2 --heads L2H4,L2H5,L2H6,L2H7 --mode window --window 64 "
                                 "--sinks 4 --random-pool any"),
                      "rope-remap": ("interp rope-remap --model tiny-llama --heads L2H0,L2H1 --scale 0.5 --draws 3",
                                     "interp rope-remap --heads retrieval --from runs/ret --offset 512 --bands lowest:8")}),
    Record("head_curve", {"ablate": _CLI + "ablate_cmds.ablate"}, "head_curve",
           "interp.analyses.head_curve.HeadCurveResult", "interp.analyses.head_curve.HeadCurveConfig",
           "interp.analyses.head_curve.run_head_curve", "interp.figures.experiments.head_curve_figures", "metric",
           None, {"model": STR, "metric": STR, "kind": STR, "points": LIST, "baseline": OBJ}, ABLATE, 2,
           examples={"ablate": ("interp ablate --heads retrieval --from runs/ret --curve keep --ks 0,1,2,4,8,16",
                                 "interp ablate --heads retrieval --from runs/ret --curve keep --mode window --window 64 "
                                 "--ks 0,4,8")}),
    Record("patching", {"patch": _CLI + "patch_cmds.patch"}, "patching", "interp.patching.result.PatchingResult",
           "interp.patching.PatchingConfig", "interp.patching.run_patching",
           "interp.figures.patching.patching_figures", "cells", None, {"model": STR, "sites": OBJ}, PATCH, 6,
           examples={"patch": ("interp patch --model tiny-llama --task niah --site head_out,resid_pre --positions=-1",
                                "interp patch --model tiny-llama --task repeated --method atp-qk --site head_out,q,k",
                                "interp patch --model tiny-qwen2 --task ioi --n-pairs 32 --site resid_pre,head_out "
                                "--positions=-1")}),
    Record("path_patching", {"patch": _CLI + "patch_cmds.patch"}, "path_patching", "interp.patching.path.PathResult",
           None, "interp.patching.path.run_path_patching", "interp.figures.patching.path_patching_figures", "cells",
           None, {"model": STR, "effects": OBJ, "receivers": LIST, "senders": LIST}, PATCH, 7,
           examples={"patch": ("interp patch --model tiny-llama --method path --senders L0H0 --receivers L1H1 --via k",)}),
    Record("rope_zero", {"rope-zero": _CLI + "rope_cmds.rope_zero"}, "rope_zero",
           "interp.analyses.rope_zero.RopeZeroResult", "interp.analyses.rope_zero.RopeZeroConfig",
           "interp.analyses.rope_zero.run_rope_zero", "interp.figures.experiments.rope_zero_figures", "metric", None,
           {"model": STR, "metric": STR, "doses": LIST, "baseline": OBJ}, ABLATE, 4,
           examples={"rope-zero": ("interp rope-zero --heads retrieval --from runs/ret --dims 0,8,16,32",
                                    "interp rope-zero --heads L2H4 --band highest --side both --prompts prompts.jsonl")}),
    Record("rope_profile", {"rope-profile": _CLI + "rope_cmds.rope_profile"}, "rope_profile",
           "interp.analyses.rope_profile.RopeProfileResult", "interp.analyses.rope_profile.RopeProfileConfig",
           "interp.analyses.rope_profile.run_rope_profile", "interp.figures.experiments.rope_profile_figures",
           "heads", None,
           {"model": STR, "usage": LIST, "pair_order": LIST, "pair_freqs": LIST, "retrieval_heads": LIST}, ABLATE, 5,
           examples={"rope-profile": ("interp rope-profile --heads retrieval --from runs/ret",
                                       "interp rope-profile --heads L2H4,L2H5 --statistic low_share --n-texts 16")}),
    Record("cache", {"cache": _CLI + "store_cmds.cache"}, None, None, "interp.store.CacheConfig",
           "interp.store.cache_activations", memory=CACHE, page=14,
           examples={"cache": ("interp cache --model tiny-qwen2 --sites resid,attn_out --out runs/cache",
                                "interp cache --model minilm-l6 --data texts.jsonl --store-dtype float16 "
                                "--out runs/cache-minilm")}),
    Record("probes", {"probe": _CLI + "store_cmds.probe"}, "probes", "interp.probes.run.ProbeResult",
           "interp.probes.ProbeConfig", "interp.probes.run_probes", "interp.figures.probes.figures", None, None,
           {"model": STR, "layers": LIST}, CACHE, 10,
           examples={"probe": ("interp probe --model minilm-l6 --out runs/probe", "interp probe --store runs/cache --no-heads")}),
    Record("atlas", {"atlas": _CLI + "atlas_cmds.atlas"}, "atlas", "interp.analyses.atlas.Atlas", None, None,
           "interp.figures.atlas.atlas_figures", None, None, {"models": LIST, "published": OBJ}, None, 0,
           examples={"atlas": ("interp atlas runs/results-real --out runs/atlas", "interp atlas runs/ret runs/demo --json")}),
    Record("theta", {"organisms sweep": None}, "theta", "interp.organisms.theta.ThetaSweepResult", None,
           "interp.organisms.theta.analyse_sweep", "interp.figures.sweeps.theta_figures", None, None,
           {"base": STR, "builds": LIST, "trend": OBJ}, None, 11),
)  # in the order the CLI lists their commands
BY_NAME = {r.name: r for r in RECORDS}
RESULTS = tuple(r.name for r in sorted(RECORDS, key=lambda r: r.page) if r.file)  # result kinds, in page order


def record(name: str) -> Record:
    """The record of analysis (result kind) `name`."""
    from interp.errors import InvalidInputError

    if name not in BY_NAME:
        raise InvalidInputError(f"unknown analysis {name!r}; analyses: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def by_file(stem: str) -> Record:
    """The record whose result file is `<stem>.json`."""
    return next(r for r in RECORDS if r.file == stem)


def commands() -> dict:
    """Every CLI command that runs an analysis -> its typer function (dotted path), in the CLI's order; commands
    registered elsewhere (None) left out."""
    out: dict = {}
    for r in RECORDS:
        for c, f in r.commands.items():
            if f is not None:
                out.setdefault(c, f)
    return out


def examples() -> dict:
    """{command: its --help example lines} of every analysis command, each record's lines in record order."""
    out: dict = {}
    for r in RECORDS:
        for c, lines in r.examples.items():
            out[c] = out.get(c, ()) + tuple(lines)
    return out


def model_commands() -> tuple:
    """The commands of the analyses that run a model over prompts (a detect, ablate or patch memory profile; the
    store's analyses and those reading run folders left out), in the CLI's order."""
    return tuple(dict.fromkeys(c for r in RECORDS if r.memory is not None and r.memory is not CACHE
                               for c in r.commands))


def memory_profiles() -> dict:
    """The planner's profiles by name (detect, ablate, patch, cache), from the records, in the CLI's order."""
    return {r.memory.name: r.memory for r in RECORDS if r.memory is not None}


def exports() -> dict:
    """{public name: its module's dotted path} of every analysis's config class, entry function and result class
    (the face of `interp.analyses`, which lists them all)."""
    out = {}
    for r in RECORDS:
        for path in (r.config, r.run, r.result):
            if path:
                module, _, name = path.rpartition(".")
                out[name] = module
    return out


def resolve(path: str):
    """The object a dotted path names (`interp.analyses.retrieval.RetrievalResult`), its module imported now."""
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# ------------------------------------------------------------------------------------------ result files


RERUN = "rerun the command that wrote it (its run.json names it)"


def _kind(t) -> str:
    return {NUM: "a number", STR: "a string", LIST: "a list", OBJ: "an object"}[t]


def check_result(stem: str, d, f) -> dict:
    """`d`, the parsed result file `f` of kind `stem`, if it is an object holding the fields its record names
    (`Record.fields`) with their JSON types; InvalidInputError in one line naming the file otherwise."""
    from interp.errors import InvalidInputError
    from interp.runtime.jsonio import json_type

    if not isinstance(d, dict):
        raise InvalidInputError(f"result file {f} holds a JSON {json_type(d)}, not a JSON object; {RERUN}")
    fields = BY_NAME[stem].fields if stem in BY_NAME else {}
    missing = [k for k in fields if k not in d]
    if missing:
        raise InvalidInputError(f"result file {f} is not a complete {stem} result: it lacks {', '.join(map(repr, missing))}"
                                f" (it holds {', '.join(map(repr, list(d)[:6])) or 'nothing'}"
                                f"{' ...' if len(d) > 6 else ''}); {RERUN}")
    for k, t in fields.items():
        v = d[k]
        if not isinstance(v, t) or isinstance(v, bool):
            raise InvalidInputError(f"result file {f}: {k!r} is a JSON {json_type(v)}, not {_kind(t)}; the file is "
                                    f"damaged or not a {stem} result; {RERUN}")
    return d


def result_files(folder) -> list:
    """(kind, path) of the result files in `folder`, in page order."""
    folder = Path(folder)
    return [(stem, folder / f"{stem}.json") for stem in RESULTS if (folder / f"{stem}.json").is_file()]


def load_result(path, kind: str | None = None):
    """The result object of a run folder (or of one result file, `retrieval.json`), of the class its record names,
    with `to_dict()` / `to_frame()`. A folder holding several results (an ablation run that also detected its
    heads) gives the first on its report page, the analysis the command ran; `kind` picks another
    ("retrieval"). The files are checked where they are read: InvalidInputError in one line naming the file and
    what is wrong (damaged, cut short, a field missing or of the wrong type, an unknown result file)."""
    from interp.errors import InvalidInputError
    from interp.runtime.jsonio import read_json

    p = Path(path)
    if p.is_dir():
        run = read_json(p / "run.json", "run record", "rerun the command that wrote the folder") \
            if (p / "run.json").is_file() else {}
        listed = run.get("files")
        found = [(k, f) for k, f in result_files(p) if not isinstance(listed, list) or f.name in listed]
        if kind is not None:
            record(kind)
            found = [(k, f) for k, f in found if k == kind]
        if not found:
            what = f"no {kind}.json" if kind else "no interp result file"
            raise InvalidInputError(f"{p} holds {what} of its run ({', '.join(s + '.json' for s in RESULTS)}); pass "
                                    "the folder a command wrote with --out")
        kind, f = found[0]
    elif p.is_file() or p.suffix == ".json":
        f = p
        if kind is None:
            if p.stem not in BY_NAME or BY_NAME[p.stem].file is None:
                raise InvalidInputError(f"result file {p}: {p.name!r} is not an interp result file (one of "
                                        f"{', '.join(s + '.json' for s in RESULTS)})")
            kind = p.stem
        record(kind)
    else:
        raise InvalidInputError(f"{p}: no such run folder or result file")
    d = check_result(kind, read_json(f, "result file", RERUN, want=None), f)
    cls = record(kind).result_class()
    try:
        return cls.from_dict(restore_nonfinite(d))
    except InvalidInputError as e:
        raise InvalidInputError(f"result file {f}: {e}; {RERUN}") from None


def restore_nonfinite(obj):
    """The inverse of `runtime.jsonio.strict`: a dict's "nonfinite" note ({"cohens_d": "-inf"}) turned back into the
    floats it names (the note dropped), at every depth. Non-finite list items were written as null with no note and
    stay None."""
    if isinstance(obj, list):
        return [restore_nonfinite(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    note = obj.get("nonfinite")
    out = {k: restore_nonfinite(v) for k, v in obj.items()}
    if isinstance(note, dict) and note and all(v in ("nan", "inf", "-inf") and k in obj and obj[k] is None
                                               for k, v in note.items()):
        del out["nonfinite"]
        out.update({k: float(v) for k, v in note.items()})
    return out


def from_dict(cls, d, where: str = ""):
    """A dataclass `cls` from its `asdict` form `d`: nested dataclasses rebuilt from the field annotations
    (`list[X]`, `X | None`, `dict[str, X]`), other values kept as they are, keys that are not fields ignored.
    The exact inverse of `dataclasses.asdict` on what JSON holds. InvalidInputError naming the field when a
    field without a default is missing or a nested record is not an object."""
    from interp.errors import InvalidInputError
    from interp.runtime.jsonio import json_type

    if not isinstance(d, dict):
        raise InvalidInputError(f"{where or cls.__name__!r} is a JSON {json_type(d)}, not an object")
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        name = f"{where}.{f.name}" if where else f.name
        if f.name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InvalidInputError(f"{name!r} is missing")
            continue
        kw[f.name] = _value(hints[f.name], d[f.name], name)
    return cls(**kw)


def _value(tp, v, where: str):
    from interp.errors import InvalidInputError
    from interp.runtime.jsonio import json_type

    if dataclasses.is_dataclass(tp):
        return from_dict(tp, v, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if v is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], v, where) if len(inner) == 1 else v
    if origin is list and args and _nested(args[0]):
        if not isinstance(v, list):
            raise InvalidInputError(f"{where!r} is a JSON {json_type(v)}, not a list")
        return [_value(args[0], x, f"{where}[{i}]") for i, x in enumerate(v)]
    if origin is dict and len(args) == 2 and _nested(args[1]):
        if not isinstance(v, dict):
            raise InvalidInputError(f"{where!r} is a JSON {json_type(v)}, not an object")
        return {k: _value(args[1], x, f"{where}.{k}") for k, x in v.items()}
    return v


def _nested(tp) -> bool:
    """Does annotation `tp` hold a dataclass somewhere (so values under it are rebuilt)?"""
    return dataclasses.is_dataclass(tp) or any(_nested(a) for a in typing.get_args(tp))
