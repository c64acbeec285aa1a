"""The package's shape: every import (also those inside functions) points down the floors below, and no
module imports itself back through others. See the README's architecture section for what each floor holds."""

from __future__ import annotations

import ast
from pathlib import Path

import interp

ROOT = Path(interp.__file__).parent

# bottom to top; a module may import its own package and the packages of lower floors only
FLOORS = [
    ["errors"],
    ["sites", "runtime", "corpus", "figures"],
    ["hooks", "stats"],
    ["models"],
    ["tasks"],
    ["experiments", "store", "interop"],
    ["analyses", "patching", "probes"],
    ["organisms"],
    ["cli"],
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the interp modules it imports (anywhere in its body)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{m}: relative import (write `from interp.x import y`)"
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            for t in names:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != "interp" and t != m and not m.startswith(t + "."):
                    edges[m].add(t)
    return edges


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_every_module_has_a_floor():
    rooms = {_room(m) for m in _modules()} - {""}
    assert rooms == set(FLOOR), f"rooms without a floor: {rooms - set(FLOOR)}; floors without a room: " \
                                f"{set(FLOOR) - rooms}"
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.stem not in ("__init__",) and p.stem not in FLOOR)
    assert not loose, f"modules at the package root outside the floors: {loose}"


def test_imports_point_down():
    up = []
    for m, targets in _imports(_modules()).items():
        for t in targets:
            a, b = _room(m), _room(t)
            if a != b and FLOOR[b] >= FLOOR[a]:
                up.append(f"{m} -> {t} (floor {FLOOR[a]} -> {FLOOR[b]})")
    assert not up, "imports that do not point down:\n" + "\n".join(sorted(up))


def test_no_import_cycles():
    edges = _imports(_modules())
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_check_sees_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks above can fail: a planted upward import and a planted cycle are both reported."""
    pkg = tmp_path / "interp"
    (pkg / "models").mkdir(parents=True)
    (pkg / "cli").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "a.py").write_text("def f():\n    from interp.cli.b import g\n")
    (pkg / "cli" / "__init__.py").write_text("")
    (pkg / "cli" / "b.py").write_text("from interp.models.a import f\n")
    monkeypatch.setitem(globals(), "ROOT", pkg)
    edges = _imports(_modules())
    assert "interp.cli.b" in edges["interp.models.a"] and "interp.models.a" in edges["interp.cli.b"]
    try:
        test_imports_point_down()
    except AssertionError as e:
        assert "interp.models.a -> interp.cli.b" in str(e)
    else:
        raise AssertionError("the upward import was not reported")
    try:
        test_no_import_cycles()
    except AssertionError as e:
        assert "import cycles" in str(e)
    else:
        raise AssertionError("the cycle was not reported")


def test_every_subpackage_is_an_attribute_of_interp():
    """`interp.<name>` works for every module and subpackage at the package root (loaded on first use)."""
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(interp.__path__)]
    assert set(names) >= set(FLOOR)
    for name in names:
        assert getattr(interp, name).__name__ == f"interp.{name}"
