"""The comparison step: the table every causal analysis prints.

Per condition and metric: the mean with a bootstrap CI; against the baseline, on the same samples:
the paired difference with its CI, a sign-flip permutation p-value and Cohen's d_z. Pools (e.g. the
per-sample mean over random head sets) become rows of their own, and `direct` pairs (e.g. target vs the
pooled random sets) get the same paired test directly. A pool's CIs (its mean, its difference from the
baseline, a direct test against it) come from a two-level bootstrap that resamples its member sets and
the samples (`stats.sets_mean_ci`), so the spread between sets counts; its p-values are sign-flip tests
over samples of the pooled per-sample mean, with the sets held fixed (their `p_method` says so).
Every p-value of the table (each condition and pool against the baseline, each direct test) also gets a
Holm-adjusted one over that family, per tested metric (`p_holm`; `p_holm_family`: how many tests): with
several random sets and doses, some raw p below 0.05 are expected by chance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.experiments.runner import Outcomes


@dataclass
class ConditionStats:
    name: str
    role: str
    heads: list[str]
    estimates: dict  # metric -> Estimate dict (mean, lo, hi, n, ...)
    vs_baseline: dict | None  # metric -> PairedComparison dict (diff, diff_lo, diff_hi, p_value, cohens_d, ...)
    per_sample: dict  # metric -> list of per-sample values
    info: dict = field(default_factory=dict)
    head_write_rel: float | None = None  # mean write norm of the heads / the median head's


@dataclass
class Comparison:
    metric: str  # the primary metric
    rows: list[ConditionStats]
    pooled: list[ConditionStats]
    direct: list[dict]  # {"x": name, "y": name, "metric": m, **PairedComparison}
    baseline: str = "baseline"

    def row(self, name: str) -> ConditionStats:
        for r in self.rows + self.pooled:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_frame(self, notes: dict | None = None):
        """Long table: one row per (condition, metric), with the paired comparison against baseline (diff, CI,
        p, the smallest p its design allows, the Holm-adjusted p, d_z), then one row per direct test (role
        "test", condition "X vs Y": e.g. the target against the pooled random sets), the difference in the
        diff columns. `notes`: {condition name or "X vs Y": sentence} put in a `note` column (e.g. that fewer
        distinct random sets exist than were asked), beside each row's `p_note`."""
        import pandas as pd

        notes = notes or {}
        recs = []
        for r in self.rows + self.pooled:
            for m, e in r.estimates.items():
                v = (r.vs_baseline or {}).get(m) or {}
                recs.append({"condition": r.name, "role": r.role, "pooled": r in self.pooled,
                             "heads": ",".join(r.heads), "metric": m, "mean": e["mean"], "lo": e["lo"],
                             "hi": e["hi"], "n": e["n"], **_test_columns(v), "head_write_rel": r.head_write_rel,
                             "note": notes.get(r.name), **{f"info.{k}": (json_scalar(x)) for k, x in r.info.items()}})
        for t in self.direct:
            name = f"{t['x']} vs {t['y']}"
            recs.append({"condition": name, "role": "test", "pooled": False, "heads": "", "metric": t["metric"],
                         "mean": None, "lo": None, "hi": None, "n": t.get("n"), **_test_columns(t),
                         "head_write_rel": None, "note": notes.get(name)})
        return pd.DataFrame.from_records(recs)


def _test_columns(v: dict) -> dict:
    """A paired test's columns in a long table (None where the row has no test)."""
    return {k: v.get(k) for k in ("diff", "diff_lo", "diff_hi", "p_value", "p_floor", "p_holm", "cohens_d",
                                  "p_note")}


def json_scalar(x):
    return x if isinstance(x, (int, float, str, bool)) or x is None else str(x)


def compare(outcomes: Outcomes, metrics: Sequence[str] | None = None, tested: Sequence[str] | None = None,
            baseline: str = "baseline", pools: dict[str, Sequence[str]] | None = None,
            direct: Sequence[tuple[str, str]] = (), write_rel=None, n_boot: int = 10000, n_perm: int = 10000,
            seed: int = 0) -> Comparison:
    """Summarise `outcomes`.

    metrics: which metrics get CIs (default: all of the task's); tested: which get the paired tests
    (default: the primary metric, the task's first). pools: {row name: [condition names]}, rows made
    of the per-sample mean over those conditions. direct: (x, y) pairs of condition or pool names
    compared with the paired test on every tested metric. write_rel(heads) -> float | None adds
    each condition's relative write norm.
    """
    from interp import stats

    task_metrics = tuple(outcomes.task.metrics)
    metrics = tuple(metrics or task_metrics)
    tested = tuple(tested or metrics[:1])
    for m in metrics + tested:
        if m not in task_metrics:
            raise InvalidInputError(f"metric {m!r} is not one of the task's: {', '.join(task_metrics)}")
    vals = {n: dict(v) for n, v in outcomes.values.items()}
    for name, members in (pools or {}).items():
        missing = [m for m in members if m not in vals]
        if missing or not members:
            raise InvalidInputError(f"pool {name!r} names unknown conditions {missing}")
        vals[name] = {m: np.mean([vals[c][m] for c in members], axis=0) for m in task_metrics}
    has_base = baseline in vals
    kw = dict(n_boot=n_boot, seed=seed)

    def summary(name, role, heads, info, pooled=False):
        v = vals[name]
        vs = None
        if has_base and name != baseline:
            vs = {m: stats.paired_diff(v[m], vals[baseline][m], n_perm=n_perm, **kw).to_dict() for m in tested}
        per = {m: _listed(v[m], pooled) for m in metrics}
        return ConditionStats(name, role, [str(h) for h in heads],
                              {m: stats.mean_ci(v[m], **kw).to_dict() for m in metrics}, vs, per, dict(info),
                              None if write_rel is None or not heads else write_rel(heads))

    rows = [summary(c.name, c.role, c.heads, c.info) for c in outcomes.conditions]
    pooled = [summary(name, "control", (), {"members": list(members)}, pooled=True)
              for name, members in (pools or {}).items()]
    sets = {name: {m: np.stack([np.asarray(vals[c][m], dtype=float) for c in members]) for m in task_metrics}
            for name, members in (pools or {}).items()}
    for r in pooled:  # a pooled control's CIs resample its sets as well as the samples
        for m in metrics:
            _set_ci(r.estimates[m], *stats.sets_mean_ci(sets[r.name][m], **kw)[1:], ("lo", "hi", "method"))
        for m in tested if r.vs_baseline is not None else ():
            _set_ci(r.vs_baseline[m], *stats.sets_mean_ci(sets[r.name][m], minus=vals[baseline][m], **kw)[1:])
    dtests = []
    for x, y in direct:
        if x not in vals or y not in vals:
            raise InvalidInputError(f"direct comparison {x!r} vs {y!r}: unknown condition")
        for m in tested:
            t = stats.paired_diff(vals[x][m], vals[y][m], n_perm=n_perm, **kw).to_dict()
            if y in sets or x in sets:  # x - (pooled sets), or (pooled sets) - y
                diffs = (vals[x][m][None, :] - sets[y][m]) if y in sets else (sets[x][m] - vals[y][m][None, :])
                _set_ci(t, *stats.sets_mean_ci(diffs, **kw)[1:])
            dtests.append({"x": x, "y": y, "metric": m, **t})
    for m in tested:  # Holm over every test of the table, per metric
        family = [r.vs_baseline[m] for r in rows + pooled if r.vs_baseline] + [t for t in dtests if t["metric"] == m]
        for t, adj in zip(family, stats.holm([t["p_value"] for t in family])):
            t["p_holm"] = float(adj)
            t["p_holm_family"] = len(family)
    return Comparison(metrics[0], rows, pooled, dtests, baseline)


def _set_ci(d: dict, lo: float, hi: float, method: str, keys=("diff_lo", "diff_hi", "ci_method")) -> None:
    """Replace a CI in an Estimate / PairedComparison dict by the pooled-sets one; a paired comparison's sign-flip
    p-value stays the one over samples of the pooled per-sample mean (the sets held fixed), and says so."""
    d[keys[0]], d[keys[1]], d[keys[2]] = lo, hi, method
    if "p_method" in d:
        d["p_method"] += " over samples of the pooled per-sample mean (sets held fixed)"


def _listed(a: np.ndarray, pooled: bool) -> list:
    """Per-sample values as a JSON list: ints for 0/1-style metrics (recall), floats otherwise."""
    a = np.asarray(a, dtype=float)
    if not pooled and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
        return [int(x) for x in a]
    return [float(x) for x in a]
