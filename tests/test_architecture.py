"""The package's shape: every import (also those inside functions) points down the floors below, no module
imports itself back through others (bench/ scripts included), and no module reaches into another package's
private names (bench/ included). See docs/architecture.md for what each floor holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import interp

ROOT = Path(interp.__file__).parent
BENCH = ROOT.parent / "bench"  # scripts importing their neighbours by bare name (`from _common import ...`)

# bottom to top; a module may import its own package and the packages of lower floors only
FLOORS = [
    ["errors"],
    ["sites", "runtime", "corpus"],
    ["hooks", "stats", "figures"],
    ["models"],
    ["tasks"],
    ["experiments", "store", "interop"],
    ["analyses", "patching", "probes"],
    ["organisms"],
    ["cli"],
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def _modules(root: Path | None = None) -> dict[str, Path]:
    """module name -> file of every module under `root` (interp by default; bench/ files are `bench.NAME`)."""
    root = root or ROOT
    out = {}
    for p in root.rglob("*.py"):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _all_modules() -> dict[str, Path]:
    return {**_modules(), **(_modules(BENCH) if BENCH.is_dir() else {})}


def _absolute(m: str, name: str, mods) -> str:
    """An absolutely imported `name` as module `m` means it: a bench script's bare name is its neighbour."""
    if m.startswith("bench.") and f"bench.{name.split('.')[0]}" in mods:
        return f"bench.{name}"
    return name


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `mods` it imports (anywhere in its body)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [_absolute(m, a.name, mods) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{m}: relative import (write `from interp.x import y`)"
                base = _absolute(m, node.module or "", mods)
                names = [f"{base}.{a.name}" for a in node.names] + [base]
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
    edges = _imports(_all_modules())
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


def _private(name: str) -> bool:
    """`_name` is private to its package; a dunder (`__version__`) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package(module: str) -> str:
    """The package a module belongs to: interp's subpackage or root module (`interp.models`, `interp.sites`),
    `interp` for the package face, `bench` for every bench script."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "interp" else parts[0]


def _private_reaches(mods: dict[str, Path]) -> list[str]:
    """Every place a module names a private name (or a private module) of another package: imports (absolute
    or relative, wherever they stand, `if TYPE_CHECKING:` blocks included), and attributes of imported modules
    read, assigned or set (`writer._X = ...`, `setattr(writer, "_X", ...)`)."""
    found = []
    for m, p in sorted(mods.items()):
        here = m if p.name == "__init__.py" else m.rpartition(".")[0]  # what a relative import starts from
        tree = ast.parse(p.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # local name -> the module it names (whole file, scopes ignored)

        def reach(owner: str, name: str, node, what: str):
            path = owner.split(".")[1:] + [name]
            if _package(owner) != _package(m) and any(_private(x) for x in path):
                found.append(f"{m}:{node.lineno} {what} {owner}.{name}")

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    full = _absolute(m, a.name, mods)
                    owner, _, name = full.rpartition(".")
                    if owner:
                        reach(owner, name, node, "imports")
                    top = a.name.split(".")[0]  # `import a.b` binds `a`
                    bound[a.asname or top] = full if a.asname else _absolute(m, top, mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                else:
                    base = _absolute(m, node.module or "", mods)
                for a in node.names:
                    reach(base, a.name, node, "imports")
                    if f"{base}.{a.name}" in mods:
                        bound[a.asname or a.name] = f"{base}.{a.name}"

        def owner_of(expr) -> str | None:
            if isinstance(expr, ast.Name):
                return bound.get(expr.id)
            if isinstance(expr, ast.Attribute):
                o = owner_of(expr.value)
                return f"{o}.{expr.attr}" if o and f"{o}.{expr.attr}" in mods else None
            return None

        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = owner_of(node.value)
                if owner:
                    reach(owner, node.attr, node, "assigns" if isinstance(node.ctx, ast.Store) else "reads")
            elif (isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str) and _private(node.args[1].value)
                  and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in
                  ("setattr", "getattr", "delattr")):
                owner = owner_of(node.args[0])
                if owner:
                    reach(owner, node.args[1].value, node, "sets")
    return found


def test_no_private_names_across_packages():
    """A name with a leading underscore belongs to its package: another package (or a bench script) that needs it
    gets a public name (or the thing moves to where it belongs)."""
    found = _private_reaches(_all_modules())
    assert not found, "private names used from another package:\n" + "\n".join(found)


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
    monkeypatch.setitem(globals(), "BENCH", tmp_path / "bench")  # none
    edges = _imports(_modules())
    assert "interp.cli.b" in edges["interp.models.a"] and "interp.models.a" in edges["interp.cli.b"]
    with pytest.raises(AssertionError, match="interp.models.a -> interp.cli.b"):
        test_imports_point_down()
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_import_cycles()


def test_the_checks_see_private_names_across_packages_and_a_bench_cycle(tmp_path, monkeypatch):
    """Planted: a private name imported relatively under TYPE_CHECKING, one assigned through an imported module,
    one read by a bench script, one set with setattr, and two bench scripts importing each other are reported;
    a private name within its package (read or assigned) and a dunder from another package are not."""
    files = {
        "interp/__init__.py": "",
        "interp/models/__init__.py": "",
        "interp/models/fetch.py": "_dist = 1\n_own = 2\n",
        "interp/models/loading.py": "from interp.models.fetch import _own\n",
        "interp/tasks/__init__.py": "",
        "interp/tasks/texts.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..models.fetch import _dist\n",
        "interp/store/__init__.py": "",
        "interp/store/writer.py": "_KNOB = 1\n__version__ = '1'\n",
        "interp/store/cache.py": "from interp.store import writer\nwriter._KNOB = 2\n",
        "interp/tasks/niah.py": "from interp.store.writer import __version__\nimport interp.store.writer as w\nw._KNOB = 0\n",
        "bench/a.py": "import interp.store.writer\nsetattr(interp.store.writer, '_KNOB', 3)\nfrom b import x\n",
        "bench/b.py": "import a\nx = a._y = 1\nfrom interp.models import fetch\nprint(fetch._dist)\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setitem(globals(), "ROOT", tmp_path / "interp")
    monkeypatch.setitem(globals(), "BENCH", tmp_path / "bench")
    assert sorted(_private_reaches(_all_modules())) == [
        "bench.a:2 sets interp.store.writer._KNOB",
        "bench.b:4 reads interp.models.fetch._dist",
        "interp.tasks.niah:3 assigns interp.store.writer._KNOB",
        "interp.tasks.texts:3 imports interp.models.fetch._dist",
    ]
    (tmp_path / "interp/tasks/texts.py").write_text("")  # the cycle check refuses relative imports outright
    with pytest.raises(AssertionError, match="bench.a -> bench.b -> bench.a"):
        test_no_import_cycles()


def test_every_subpackage_is_an_attribute_of_interp():
    """`interp.<name>` works for every module and subpackage at the package root (loaded on first use)."""
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(interp.__path__)]
    assert set(names) >= set(FLOOR)
    for name in names:
        assert getattr(interp, name).__name__ == f"interp.{name}"
