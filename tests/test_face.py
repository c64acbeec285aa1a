"""The package faces (docs/architecture.md, "Package faces"): every package's `__init__.py` is a lazy table of
names (`_EXPORTS` + `package_face`), importing a package imports none of its modules (nor torch), every listed name
resolves, `interp.*` lists a small core and still answers every name it used to, and every analysis's config,
entry function and result class is at `interp.analyses.<Name>`."""

from __future__ import annotations

import ast
import os
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import interp
from interp.runtime.records import RECORDS, resolve

ROOT = Path(interp.__file__).parent
APP = {"interp.cli"}  # the command line is the application, not a library face: `interp.cli.main` and its app


def _packages() -> list[str]:
    out = []
    for p in sorted(ROOT.rglob("__init__.py")):
        name = ".".join(p.parent.relative_to(ROOT.parent).parts)
        if name not in APP and not any(name.startswith(a + ".") for a in APP):
            out.append(name)
    return out


PACKAGES = _packages()

# what `interp.*` answered before its face was curated: users' scripts call these, so each still resolves
OLD_NAMES = [
    "load_model", "list_models", "spec_from_config", "Model", "Batch", "from_bridge", "HeadId", "KVHeadId", "Site",
    "SiteKind", "ModelSpec", "RopeSpec", "AblateHeads", "ZeroRopeDims", "WindowHeads", "RemapPositions", "Capture",
    "Patch", "head_output_means", "AttentionRows", "attention_rows", "progress", "InterpError", "InvalidInputError",
    "ModelNotFoundError", "UnsupportedModelError", "InterventionError", "NiahConfig", "build_niah", "RepeatedConfig",
    "prepare_experiment", "HeadExperiment", "logit_by_pair", "PairLogits", "logit_lens", "direct_logit_attribution",
    "run_attribution", "niah_pairs", "ioi_pairs", "ioi_scores", "repeated_pairs", "read_pairs", "CorpusData",
    "open_store", "Variant", "variant_grid", "locate_build", "measure_build", "probes_by_layer", "angles_by_layer",
    "decomposition_by_layer", "pos_pca_curves", "load_result", "RetrievalConfig", "detect_retrieval_heads",
    "InductionConfig", "detect_induction_heads", "CopySuppressionConfig", "detect_copy_suppression",
    "StreamingConfig", "run_streaming_scan", "AblationConfig", "run_ablation", "HeadCurveConfig", "run_head_curve",
    "PatchingConfig", "run_patching", "run_path_patching", "RopeZeroConfig", "run_rope_zero", "RopeProfileConfig",
    "run_rope_profile", "CacheConfig", "cache_activations", "ProbeConfig", "run_probes", "analyse_sweep",
]
CORE = {"load_model", "Model", "Batch", "HeadId", "Site", "AblateHeads", "ZeroRopeDims", "RemapPositions",
        "MeanPairs", "pair_means", "Capture", "Patch", "AttentionRows", "attention_rows", "InterpError",
        "load_result", "NiahConfig", "RepeatedConfig"}


def _face_statement(node, package: str) -> bool:
    """Whether a top-level statement of a package face belongs there: its docstring, imports of `package_face` and
    of names from other packages (never from its own modules), `_TABLE = {...}` tables and the face line."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    if isinstance(node, ast.ImportFrom):
        return node.module == "__future__" or not (node.module or "").startswith(package + ".") \
            and (node.module != "interp" or [a.name for a in node.names] == ["package_face"])
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [n.id for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if names == ["__getattr__", "__dir__", "__all__"]:
            call = node.value
            return isinstance(call, ast.Call) and getattr(call.func, "id", None) == "package_face"
        return all(n.startswith("_") for n in names) and isinstance(node.value, (ast.Dict, ast.DictComp))
    return False


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_face_has_one_shape(package):
    path = ROOT.parent / Path(*package.split(".")) / "__init__.py"
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if package == "interp":  # the root also defines the helper itself, its aliases and __version__
        body = [n for n in body if not isinstance(n, ast.FunctionDef)
                and not (isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["__version__"])]
    odd = [f"line {n.lineno}: {ast.unparse(n)[:80]}" for n in body if not _face_statement(n, package)]
    assert not odd, f"{package}/__init__.py is not a face (docs/architecture.md, 'Package faces'):\n" + "\n".join(odd)
    assert any(isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple) for n in body), \
        f"{package}/__init__.py has no `__getattr__, __dir__, __all__ = package_face(...)` line"


def test_the_shape_check_can_fail():
    eager = ast.parse("from interp.hooks.capture import Capture\n__all__ = ['Capture']").body
    assert not any(_face_statement(n, "interp.hooks") for n in eager)
    face = ast.parse('"""doc"""\nfrom interp import package_face\n_EXPORTS = {"Capture": "capture"}\n'
                     "__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)").body
    assert all(_face_statement(n, "interp.hooks") for n in face)


def test_importing_a_package_imports_none_of_its_modules_nor_torch():
    """Each package imported alone, in a fresh interpreter: no torch, no transformers, none of its own modules."""
    code = ("import importlib, sys\np = sys.argv[1]\nimportlib.import_module(p)\n"
            "own = sorted(m for m in sys.modules if m.startswith(p + '.'))\n"
            "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules), own)")
    env_path = str(ROOT.parent)
    procs = {p: subprocess.Popen([sys.executable, "-c", code, p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, "PYTHONPATH": env_path, "OMP_NUM_THREADS": "1"}) for p in PACKAGES}
    bad = []
    for p, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        if out.strip() != "[] []":
            bad.append(f"{p}: {out.strip()}")
    assert not bad, "packages whose import loads heavy or own modules:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_listed_name_resolves_and_dir_shows_the_face(package):
    mod = importlib.import_module(package)
    modules = {m.name for m in pkgutil.iter_modules(mod.__path__)}
    assert list(mod.__all__) == sorted(mod._EXPORTS)
    assert not set(mod.__all__) & modules, "a listed name that is also a module would be shadowed by it"
    for name in mod.__all__:
        obj = getattr(mod, name)
        where = mod._EXPORTS[name]
        home = importlib.import_module(where if where.startswith("interp.") else f"{package}.{where}")
        assert obj is getattr(home, name), f"{package}.{name}"
    assert dir(mod) == sorted(set(mod.__all__) | modules)
    with pytest.raises(AttributeError):
        mod.no_such_name_here  # noqa: B018


def test_interp_lists_a_small_core_and_the_subpackages():
    subpackages = {m.name for m in pkgutil.iter_modules(interp.__path__)}
    assert CORE <= set(interp.__all__)
    assert len(interp.__all__) <= 40, "the face of interp is the core; the rest lives in its subpackage"
    assert not {"run_ablation", "niah_pairs", "probes_by_layer", "RetrievalConfig"} & set(interp.__all__)
    assert set(dir(interp)) == set(interp.__all__) | subpackages


@pytest.mark.parametrize("name", OLD_NAMES)
def test_every_name_interp_exported_still_resolves(name):
    assert getattr(interp, name) is not None


def test_every_analysis_is_in_interp_analyses():
    """Derived from the records, checked against them: each config class, entry function and result class."""
    import interp.analyses as analyses

    paths = [p for r in RECORDS for p in (r.config, r.run, r.result) if p]
    assert len(paths) >= 30
    for path in paths:
        name = path.rpartition(".")[2]
        assert name in analyses.__all__, name
        assert getattr(analyses, name) is resolve(path), path
        assert getattr(interp, name) is resolve(path), f"interp.{name} (an alias) is not {path}"
    for name in ("needle_decomposition", "logit_by_pair", "prepare_experiment"):
        assert name in analyses.__all__


def test_the_new_interventions_stand_beside_remap_positions():
    from interp.hooks import bandpatch

    assert interp.MeanPairs is bandpatch.MeanPairs and interp.pair_means is bandpatch.pair_means
    assert interp.hooks.MeanPairs is bandpatch.MeanPairs


def test_every_interp_path_the_docs_name_exists():
    """Module paths in docs/*.md and the README (`interp/hooks/remap.py`, `interp/runtime/`) name files that
    exist."""
    repo = ROOT.parent
    pages = sorted((repo / "docs").glob("*.md")) + [repo / "README.md"]
    missing = [f"{p.name}: {m}" for p in pages for m in re.findall(r"\binterp/[\w/]*\w(?:\.py)?\b",
                                                                      p.read_text(encoding="utf-8"))
               if not (repo / m).exists()]
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)
