"""bench/attention_paths.py: both attention paths it times compute the attention of the call they stand for (the
float32 reference), for a masked call with repeated KV heads and a causal call with grouped ones, and the recorder
counts each call shape."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


def _module():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("attention_paths", ROOT / "bench" / "attention_paths.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# (q shape, k shape as the call passed it, masked, is_causal, enable_gqa): a patching pass's masked call with the
# KV heads repeated (6 query heads, 2 KV heads), and a full-sequence causal call with grouped KV heads
CALLS = [((3, 6, 4, 8), (3, 6, 7, 8), True, False, False), ((2, 6, 5, 8), (2, 2, 5, 8), False, True, True)]


@pytest.mark.parametrize("key", CALLS)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 0.02)])
def test_both_paths_equal_the_reference(key, dtype, tol):
    ap = _module()
    sdpa, grouped, reference, _ = ap._paths(torch, key, n_kv=2, dtype=dtype)
    ref = reference()
    b, hq, s, d = key[0]
    assert ref.shape == (b, s, hq, d)
    for fn in (sdpa, grouped):
        out = fn()
        assert out.shape == ref.shape and out.dtype == dtype
        assert (out.float() - ref).abs().max().item() < tol


def test_reference_is_bottom_right_causal_with_grouped_heads():
    """The reference, written out one query at a time: query i of s sees the keys up to kl - s + i, query head h
    reads KV head h // (query heads per KV head)."""
    ap = _module()
    key = ((2, 6, 3, 4), (2, 6, 5, 4), True, False, False)
    ref = ap._paths(torch, key, n_kv=2, dtype=torch.float32)[2]()
    q, k, v = ap._paths(torch, key, n_kv=2, dtype=torch.float32)[3]
    b, hq, s, d = q.shape
    kl = k.shape[2]
    for h in range(hq):
        for i in range(s):
            n = kl - s + i + 1
            w = torch.softmax(torch.einsum("bd,bnd->bn", q[:, h, i], k[:, h // 3, :n]) / d ** 0.5, dim=-1)
            want = torch.einsum("bn,bnd->bd", w, v[:, h // 3, :n])
            assert torch.allclose(ref[:, i, h], want, atol=1e-5)


def test_record_counts_call_shapes():
    ap = _module()
    q = torch.randn(1, 2, 3, 4)

    def two_calls():
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        F.scaled_dot_product_attention(q[:, :, :2], q, q, attn_mask=torch.ones(1, 1, 2, 3, dtype=torch.bool))

    calls = ap._record(torch, two_calls)
    assert calls[((1, 2, 3, 4), (1, 2, 3, 4), False, True, False)] == 2
    assert calls[((1, 2, 2, 4), (1, 2, 3, 4), True, False, False)] == 1
    assert F.scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"  # the spy is taken off
