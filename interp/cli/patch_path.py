"""`interp patch --method path`."""

from __future__ import annotations

from interp.cli.patch_pairs import _check_corrupt, _ioi_scores, _pairs
from interp.cli.patch_print import _print_ioi
from interp.cli.runs import final_path, open_run, write_result
from interp.errors import InvalidInputError


def path(load, pairs, task, lengths, depths, seeds, copy_length, seed, cfg, senders, receivers, via, out, overwrite,
         as_json, n_pairs=32, corrupt=None) -> None:
    """`interp patch --method path`: two-pass path patching of the senders via the receivers' q, k or v (or
    directly on the logits), on the pairs; path_patching.json (and ioi.json with --task ioi) written, printed."""
    from interp.patching.path import VIAS, run_path_patching
    from interp.sites import as_heads

    if via not in VIAS:
        raise InvalidInputError(f"--via {via!r}: valid are {', '.join(VIAS)}")
    if not senders:
        raise InvalidInputError("--method path needs --senders, e.g. --senders L0H0")
    _check_corrupt(corrupt, task)
    o, m = open_run("patch", out, overwrite, load)
    snd, rcv = (as_heads(h or "", n_heads=m.spec.n_heads) for h in (senders, receivers))
    ps = _pairs(m, pairs, task, lengths, depths, seeds, copy_length, seed, n_pairs, corrupt)
    res = run_path_patching(m, ps, snd, rcv, via=via, config=cfg)
    write_result(res, o, "path_patching", as_json)
    ioi = _ioi_scores(m, ps, o, task, cfg.n_boot, seed)
    if as_json:
        return
    from interp.cli.output import console

    c = console()
    if ioi is not None:
        _print_ioi(c, ioi)
    target = f"via {via} of {', '.join(res.receivers)}" if via != "logits" else "directly on the logits"
    c.print(f"[bold]{res.model}[/]: path patching ({res.direction}) of {', '.join(res.senders)} {target}; "
            f"{'normalised ' if res.normalized else ''}{res.metric}, {len(ps)} pairs")
    import numpy as np

    from interp.patching.result import ratio_of_means, unstable_gaps

    shaky = unstable_gaps(res.donor_value, res.base_value) if res.normalized else []
    if shaky:
        c.print(f"  [yellow]warning[/]: {len(shaky)} of {len(ps)} pairs have a donor - base gap below a quarter of the "
                "mean gap or of the other sign, so per-pair means can be dominated by them: the ratio of means (sum "
                "of patched - base over sum of gaps) follows each", highlight=False)
    for name, e in res.effects.items():
        ci = "" if e["lo"] is None else f" [{e['lo']:+.3f}, {e['hi']:+.3f}]"
        pooled = ratio_of_means(e["per_pair"], res.donor_value, res.base_value) if shaky else np.nan
        pool = f"; ratio of means {float(pooled):+.3f}" if np.isfinite(pooled) else ""
        c.print(f"  {name}: {e['mean']:+.3f}{ci}{pool}")
    if res.receiver_inputs:
        c.print(f"  patched in pass 2: {'; '.join(res.receiver_inputs)}")
    c.print(f"written to {final_path(o)}/")
