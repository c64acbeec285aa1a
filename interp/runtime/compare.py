"""Do two runs agree? Every number of one run's result JSON set against the same place in the other's.

A result file is a tree of dicts and lists; its leaves are compared by path (`causal.conditions[2].estimates.
late_loss.mean`). Numbers agree when |a - b| <= atol + rtol |b| (NaN equals NaN); strings, booleans and nulls
when equal. What a run records about itself rather than measures (`provenance`: commit, package versions, time;
run.json's cost) is left out, and the settings (`config`) are compared apart: runs with different settings are
different experiments, which the comparison says before it says anything about their numbers."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

SELF_RECORDS = ("provenance",)  # what a run says about itself, not what it measured (its cost is in run.json)
SETTINGS = ("config",)


@dataclass
class Difference:
    path: str
    a: object
    b: object
    abs_diff: float | None = None  # numbers only


@dataclass
class FileComparison:
    """One result file of both runs. `numbers`: numeric leaves found in both; `identical`: of those, equal bit
    for bit; `within`: within the tolerance. `differences`: leaves outside it (numbers, worst first, then other
    values), `structure`: paths present in one run only or holding different kinds of value (a list of another
    length, a number against a string); `settings`: differing leaves under `config`."""

    name: str
    numbers: int = 0
    identical: int = 0
    within: int = 0
    max_abs_diff: float = 0.0
    worst: str | None = None
    differences: list[Difference] = field(default_factory=list)
    structure: list[Difference] = field(default_factory=list)
    settings: list[Difference] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.differences and not self.structure


@dataclass
class RunComparison:
    a: str
    b: str
    atol: float
    rtol: float
    files: list[FileComparison]
    only_a: list[str]  # result files one run has and the other lacks
    only_b: list[str]

    @property
    def agree(self) -> bool:
        return not self.only_a and not self.only_b and all(f.agree for f in self.files)

    @property
    def same_settings(self) -> bool:
        return not any(f.settings for f in self.files)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["agree"], d["same_settings"] = self.agree, self.same_settings
        for f, fd in zip(self.files, d["files"]):
            fd["agree"] = f.agree
        return d


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _kind(x) -> str:
    return "number" if _is_number(x) else "dict" if isinstance(x, dict) else "list" if isinstance(x, list) \
        else type(x).__name__


def compare_trees(a, b, name: str = "", atol: float = 1e-8, rtol: float = 1e-6) -> FileComparison:
    """Compare two parsed result files leaf by leaf (see the module docstring)."""
    check_tolerances(atol, rtol)
    out = FileComparison(name)
    numeric: list[Difference] = []

    def walk(x, y, path: str, in_settings: bool):
        if isinstance(x, dict) and isinstance(y, dict):
            for k in list(x) + [k for k in y if k not in x]:
                if not path and k in SELF_RECORDS:
                    continue
                p = f"{path}.{k}" if path else str(k)
                if k not in x or k not in y:
                    out.structure.append(Difference(p, x.get(k, "<absent>"), y.get(k, "<absent>")))
                else:
                    walk(x[k], y[k], p, in_settings or (not path and k in SETTINGS))
            return
        if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}[{i}]", in_settings)
            return
        if in_settings:
            if x != y:
                out.settings.append(Difference(path, x, y))
            return
        if _is_number(x) and _is_number(y):
            out.numbers += 1
            if x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)):
                out.identical += 1
                out.within += 1
                return
            d = abs(x - y)  # inf - inf and nan against a number give nan: outside any tolerance
            if d <= atol + rtol * abs(y):
                out.within += 1
            else:
                numeric.append(Difference(path, x, y, d))
            if not d <= out.max_abs_diff:
                out.max_abs_diff, out.worst = d, path
            return
        if _kind(x) != _kind(y) or isinstance(x, list):  # a list of another length, a number against a string
            out.structure.append(Difference(path, _summary(x), _summary(y)))
        elif x != y:
            out.differences.append(Difference(path, x, y))

    walk(a, b, "", False)
    numeric.sort(key=lambda d: -d.abs_diff if d.abs_diff == d.abs_diff else -math.inf)
    out.differences = numeric + out.differences
    return out


def _summary(x):
    return f"<list of {len(x)}>" if isinstance(x, list) else f"<{_kind(x)}>" if isinstance(x, dict) else x


def check_tolerances(atol, rtol, atol_name: str = "atol", rtol_name: str = "rtol") -> None:
    """Refuse a tolerance that is negative or not a finite number: rtol=inf makes every pair of numbers agree
    and nan fails every `<` check while passing `< 0`, so either would turn the comparison off silently."""
    from interp.errors import InvalidInputError

    for name, v in ((atol_name, atol), (rtol_name, rtol)):
        if not _is_number(v) or not math.isfinite(v) or v < 0:
            why = ("an infinite or nan tolerance would make any two numbers agree (or none)"
                   if _is_number(v) and not math.isfinite(v) else "a tolerance is a distance")
            raise InvalidInputError(f"{name} must be a finite number >= 0, got {v!r}: {why}; the defaults are "
                                    f"atol 1e-08, rtol 1e-06")


def compare_runs(a: str, b: str, trees_a: dict[str, object], trees_b: dict[str, object], atol: float = 1e-8,
                 rtol: float = 1e-6) -> RunComparison:
    """trees_*: result file name -> parsed JSON of each run folder. Tolerances: finite numbers >= 0."""
    check_tolerances(atol, rtol)
    common = [n for n in trees_a if n in trees_b]
    return RunComparison(a, b, atol, rtol, [compare_trees(trees_a[n], trees_b[n], n, atol, rtol) for n in common],
                         sorted(set(trees_a) - set(trees_b)), sorted(set(trees_b) - set(trees_a)))
