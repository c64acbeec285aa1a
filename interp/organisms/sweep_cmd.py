"""`interp organisms sweep`: build the missing rope_theta variants, measure every build (cached per build),
write the head-count-vs-theta analysis as a run folder: theta.json, theta.csv (one row per build), table.md,
run.json and the report page (index.html with the figures), through the same run-folder code as every interp
command (interp.runtime.runs: written in place, so the cached measures in --out make a rerun resume)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _err(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def run_sweep(args, argv: list[str]) -> int:
    """Build, measure and analyse the variants of `args` (the parsed options of `argv`); 0, or 2 with one error line."""
    from interp.runtime import runs

    runs.begin(["organisms", "sweep", *argv], report=_report)  # its clock starts now: run.json's compute record

    import torch

    from interp.errors import InterpError
    from interp.organisms.sweep import BUILDS_DIR, Variant, build_missing, variant_grid, locate_build
    from interp.organisms.theta import BuildMeasure, analyse_sweep, detection_niah, measure_build
    from interp.runtime.jsonio import write_json

    if len(args.thetas) < 2:
        return _err("a sweep needs at least two --thetas")
    try:
        variants = variant_grid(args.base, args.thetas, args.seeds)
        variants += [v for v in (Variant(args.base, t, s) for t, s in args.add) if v not in variants]
    except (KeyError, ValueError) as exc:
        return _err(exc.args[0] if exc.args else str(exc))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _err(f"--out {out} is a file; give a folder")
    builds_dir = Path(args.builds) if args.builds else BUILDS_DIR
    blocked = next((p for p in (builds_dir, *builds_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:  # checked before any build starts (mkdir would end in FileExistsError / NotADirectoryError)
        return _err(f"--builds {builds_dir}: {blocked} is a file, not a folder; give the folder where variant builds "
                    f"are found and made")
    try:
        if args.no_build:
            found = {v.name: locate_build(v, builds_dir) for v in variants}
            missing = [n for n, p in found.items() if p is None]
            if missing:
                return _err(f"not built: {', '.join(missing)} (in {builds_dir}); run without --no-build to build them "
                            f"(about 40 min each on one thread)")
        else:
            found = build_missing(variants, builds_dir, parallel=args.parallel)
    except (ValueError, RuntimeError) as exc:
        return _err(str(exc))

    try:  # the sweep's own folder, extended by a rerun (its measures are the resume): --overwrite implied
        runs.out_dir(str(out), "organisms-sweep", args.base, staged=False, overwrite=True, units=False)
    except InterpError as exc:
        return _err(str(exc))
    torch.set_num_threads(args.threads)
    (out / "measures").mkdir(parents=True, exist_ok=True)
    niah = detection_niah(args.lengths, args.n_seeds)
    key = {"lengths": list(args.lengths), "n_seeds": args.n_seeds, "threshold": args.threshold}
    measures = []
    for v in variants:
        path = found[v.name]
        sha = json.loads((path / "organism.json").read_text()).get("sha256")
        cache = out / "measures" / f"{v.name}.json"
        if cache.is_file():
            saved = json.loads(cache.read_text())
            if saved.get("key") == key and saved["measure"].get("sha256") == sha:
                m = BuildMeasure.from_dict(saved["measure"])
                m.path = str(path)  # the same weights (sha256), wherever the folder is now
                measures.append(m)
                print(f"{v.name}: measured already ({cache})")
                continue
        print(f"{v.name}: measuring {path} ...", flush=True)
        try:
            m = measure_build(path, niah=niah, threshold=args.threshold)
        except InterpError as exc:
            return _err(f"{v.name}: {exc}")
        m.name = v.name
        write_json({"key": key, "measure": m.to_dict()}, cache)
        print(f"{v.name}: recall {m.recall:.2f}, {m.n_heads} retrieval heads {','.join(m.heads) or '-'} "
              f"({m.measure_seconds:.0f} s)", flush=True)
        measures.append(m)
    try:
        res = analyse_sweep(measures, args.base, threshold=args.threshold, n_boot=args.n_boot)
    except InterpError as exc:
        return _err(str(exc))
    write_json(res.to_dict(), out / "theta.json")
    res.to_frame().to_csv(out / "theta.csv", index=False)
    table = res.table_md()
    (out / "table.md").write_text(table + "\n")
    runs.commit_staged(True)  # run.json last (the command, the files, its cost) and the report page
    print(table)
    print(f"-> {out}/theta.json, theta.csv, table.md; report: {out / 'index.html'}")
    return 0


def _report(folder: Path, run: dict):
    from interp.figures.report import write_report

    return write_report(folder, run)
