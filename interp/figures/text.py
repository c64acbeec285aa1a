"""Words and cells for the numbers a reader may misread, shared by the CLI's tables and the report pages: a
p-value at the floor of its design or from a test without power, a multiple-comparison adjusted p beside the
raw one, a non-finite effect size. Every function reads a result's test dict (a `PairedComparison` or
`PermutationResult` dict as written to JSON) and computes nothing."""

from __future__ import annotations

import math

#: below this a test "has power": the smallest p its design allows can reach the usual 0.05
ALPHA = 0.05


def no_power(v: dict | None) -> bool:
    """The design cannot give p < 0.05: too few sign patterns / labellings (or none that move)."""
    if not v or v.get("p_floor") is None:
        return False
    return v["p_floor"] > ALPHA or v.get("n_free_layers") == 0


def p_flag(v: dict | None) -> str:
    """' (no power)' or ' (at floor)' for a p that cannot say more; '' otherwise or for results without a floor."""
    if no_power(v):
        return " (no power)"
    if v and v.get("at_floor"):
        return " (at floor)"
    return ""


def p_cell(v: dict | None, key: str = "p_value") -> str:
    """A p-value for a table: '0.0312 (at floor)', '0.125 (no power)', '0.004'; '-' when there is none."""
    if not v or v.get(key) is None:
        return "-"
    return f"{v[key]:.3g}{p_flag(v) if key == 'p_value' else ''}"


def p_note(v: dict | None) -> str | None:
    """The sentence a result stored for its p (a paired test's `p_note`, a permutation test's `note`)."""
    if not v:
        return None
    return v.get("p_note") or v.get("note")


def adjusted(v: dict | None) -> str:
    """The multiple-comparison adjusted p of a test dict ('-' without one), e.g. for a 'p (Holm)' column."""
    if not v or v.get("p_holm") is None:
        return "-"
    return f"{v['p_holm']:.3g}"


def effect(x) -> str:
    """An effect size (d, d_z) for a table: '-1.23'; '-inf (sd 0)' when every paired difference is the same
    non-zero value; 'undefined (0/0)' when every difference is 0 (NaN); '-' when there is none (None). The JSON
    holds the same as null with a "nonfinite" entry ("-inf", "nan"), the CSV as -inf / empty."""
    if x is None:
        return "-"
    x = float(x)
    if math.isinf(x):
        return f"{'+' if x > 0 else '-'}inf (sd 0)"
    if math.isnan(x):
        return "undefined (0/0)"
    return f"{x:.2f}"


def permutation_p(p: dict) -> str:
    """A layer-clustered permutation test's p in words: 'layer-clustered permutation p = 0.0286 (exact over 70
    labellings, at the floor of its design)'; 'Monte Carlo' when drawn; '(holm ...)' when adjusted."""
    how = (f"exact over {p['n_labellings']} labellings" if p.get("exact")
           else f"Monte Carlo, {p.get('n_perm')} permutations" if p.get("p_method") else None)
    flags = [x for x in (how, "no power" if no_power(p) else "at the floor of its design" if p.get("at_floor")
                         else None) if x]
    out = f"layer-clustered permutation p = {p['p_value']:.3g}" + (f" ({', '.join(flags)})" if flags else "")
    if p.get("p_holm") is not None:
        out += f", Holm-adjusted p = {p['p_holm']:.3g}"
    return out
