"""bfloat16 runs: what `--model-dtype auto` picks and records, and the sites that stay float32 in a bfloat16 model
(logits, attention rows) checked against independent references."""

import json

import pytest
import torch
import torch.nn.functional as F

import interp
from interp.runtime import precision
from interp.runtime.precision import auto_dtype, cpu_bf16_support
from tests.helpers import ids, left_padded, run_cli

X86_BF16 = "processor : 0\nflags : fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
X86_AMX = "flags : fpu avx2 avx512f amx_tile amx_bf16 amx_int8\n"
X86_PLAIN = "flags : fpu sse2 avx2 fma\n"
ARM_BF16 = "Features : fp asimd sve bf16 i8mm\n"
ARM_PLAIN = "Features : fp asimd crc32\n"


@pytest.mark.parametrize("text,machine,native", [
    (X86_BF16, "x86_64", True), (X86_AMX, "x86_64", True), (X86_PLAIN, "x86_64", False),
    (ARM_BF16, "aarch64", True), (ARM_PLAIN, "aarch64", False), (X86_BF16, "riscv64", False)])
def test_cpu_bf16_detection_reads_the_cpu_flags(text, machine, native):
    found, reason = cpu_bf16_support(text, machine)
    assert found is native
    assert reason  # says what it found
    if native and machine == "x86_64":
        assert ("avx512_bf16" in reason) or ("amx_bf16" in reason)
        assert ("no AMX" in reason) is ("amx_bf16" not in text)  # vector bf16 alone gains ~2x, AMX ~6x


def test_auto_is_bf16_on_cuda_and_follows_the_cpu_detection():
    assert auto_dtype(torch.device("cuda", 0), cuda_available=True).used == "bfloat16"
    assert auto_dtype(None, device_map="auto", cuda_available=True).used == "bfloat16"
    yes = auto_dtype(torch.device("cpu"), cpu_support=(True, "has avx512_bf16"))
    no = auto_dtype(torch.device("cpu"), cpu_support=(False, "emulated"))
    assert (yes.used, yes.asked, yes.reason) == ("bfloat16", "auto", "has avx512_bf16")
    assert (no.used, no.reason) == ("float32", "emulated")


@pytest.mark.parametrize("native", [True, False])
def test_load_model_auto_loads_what_the_detection_says(monkeypatch, native):
    monkeypatch.setattr(precision, "cpu_bf16_support", lambda: (native, "mocked"))
    m = interp.load_model("tiny-random-llama", device="cpu", dtype="auto")
    want = torch.bfloat16 if native else torch.float32
    assert next(m.hf.parameters()).dtype is want
    assert m.dtype_choice.to_dict() == {"asked": "auto", "used": "bfloat16" if native else "float32",
                                        "reason": "mocked"}
    default = interp.load_model("tiny-random-llama", device="cpu")
    assert default.dtype_choice.asked == "default" and default.dtype_choice.used == "float32"


def test_unknown_dtype_names_auto_among_the_valid_ones():
    with pytest.raises(interp.InvalidInputError, match="auto"):
        interp.load_model("tiny-random-llama", device="cpu", dtype="float8")


RUNS = {  # small runs of two analysis commands of different kinds
    "retrieval": ["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "256", "--depths", "0.5", "--n-seeds", "1"],
    "patch": ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "2", "--copy-length", "6", "--site",
              "resid_pre", "--n-boot", "20"],
}


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("name", list(RUNS))
def test_run_json_records_the_dtype_choice(monkeypatch, tmp_path, capsys, name, native):
    monkeypatch.setattr(precision, "cpu_bf16_support", lambda: (native, "mocked detection"))
    code, _, err = run_cli(RUNS[name] + ["--model-dtype", "auto", "--out", str(tmp_path / "r")], capsys)
    assert code == 0, err
    rec = json.loads((tmp_path / "r" / "run.json").read_text())["dtype"]
    assert rec == {"asked": "auto", "used": "bfloat16" if native else "float32", "reason": "mocked detection"}
    page = (tmp_path / "r" / "index.html").read_text()
    assert f"model dtype {rec['used']} (auto: mocked detection)" in page  # the report page says it too
    code, _, err = run_cli(RUNS[name] + ["--out", str(tmp_path / "d")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "d" / "run.json").read_text())["dtype"]["used"] == "float32"


def _bf16_model(family="llama", gqa=True):
    from interp.models.tiny import tiny_random_hf

    return interp.Model(tiny_random_hf(family, gqa, seed=0).to(torch.bfloat16).eval())


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_bf16_model_logits_are_a_float32_unembedding_of_its_final_hidden_state(family):
    """The reference: the model's own final hidden state (output_hidden_states) times the float32 head. Turning
    the float32 head off gives transformers' own bfloat16 logits bit for bit."""
    m = _bf16_model(family)
    x = ids(2, 10)
    with torch.no_grad():
        out = m.hf(input_ids=x, output_hidden_states=True)
    head = m.hf.get_output_embeddings()
    ref = F.linear(out.hidden_states[-1].float(), head.weight.float())
    cap = getattr(m.hf.config, "final_logit_softcapping", None)
    if cap:
        ref = torch.tanh(ref / cap) * cap
    got = m.forward(x)
    assert got.dtype is torch.float32 and out.logits.dtype is torch.float32
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-5)
    m.float32_logits = False
    own = m.forward(x)
    assert own.dtype is torch.bfloat16
    assert (got - own.float()).abs().max() > 0  # the bf16 logits really are rounded
    assert (got - own.float()).abs().max() <= got.abs().max() * 2 ** -7  # ... by at most a rounding step
    m.float32_logits = True
    assert torch.equal(m.forward(x), got)


def test_bf16_head_runs_one_float32_matmul_and_no_bf16_one():
    """The float32 head replaces the head's forward: the model's own bfloat16 head matmul does not run beside it
    (it did when the float32 logits were a forward hook recomputing them), unless float32 logits are off; remove()
    puts the class's forward back."""
    from interp.hooks.float_logits import Float32Head

    m = _bf16_model("llama")
    head = m.hf.get_output_embeddings()
    fwd = head.__dict__["forward"]
    assert isinstance(fwd, Float32Head)
    calls, inner = [], fwd.inner
    fwd.inner = lambda x: calls.append(x.dtype) or inner(x)
    with torch.no_grad():
        assert m.forward(ids(1, 6)).dtype is torch.float32
        assert calls == []
        m.float32_logits = False
        assert m.forward(ids(1, 6)).dtype is torch.bfloat16
        assert calls == [torch.bfloat16]
    m.float32_logits = True
    fwd.inner = inner
    fwd.remove()
    assert "forward" not in head.__dict__
    with torch.no_grad():
        assert m.forward(ids(1, 6)).dtype is torch.bfloat16


@pytest.mark.parametrize("family,dtype", [("llama", torch.bfloat16), ("gemma2", torch.bfloat16),
                                          ("gemma2", torch.float32), ("gpt2", torch.float32)])
def test_head_columns_are_the_full_logits_columns(family, dtype):
    """Within head_columns the head returns each row's asked vocabulary columns only: equal to those columns of the
    full logits (float32 for a bf16 model, Gemma-2's final softcap applied after), for every position kept; the
    full head is back afterwards."""
    from interp.hooks.float_logits import head_columns
    from interp.models.tiny import tiny_random_hf

    m = interp.Model(tiny_random_hf(family, True, seed=0).to(dtype).eval())
    x = ids(3, 9)
    cols = torch.tensor([[5, 17], [3, 3], [40, 2]])
    with torch.no_grad():
        full = m.forward(x)
        with head_columns(m.hf, cols):
            part = m.forward(x)
            last = m.forward(x, last_only=True)
        after = m.forward(x)
    want = full.gather(-1, cols[:, None, :].expand(-1, full.shape[1], -1))
    assert part.shape == (3, 9, 2) and part.dtype is torch.float32
    assert torch.allclose(part, want, atol=1e-5, rtol=1e-5)
    assert torch.allclose(last[:, -1], want[:, -1], atol=1e-5, rtol=1e-5)
    assert torch.equal(after, full)


def test_float32_model_logits_are_untouched():
    from interp.models.tiny import tiny_random_hf

    plain = tiny_random_hf("llama", True, seed=0).eval()
    m = interp.Model(tiny_random_hf("llama", True, seed=0).eval())
    x = ids(2, 10)
    with torch.no_grad():
        assert torch.equal(m.forward(x), plain(input_ids=x).logits)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_float32_rows_from_bf16_queries_and_keys_match_float32_eager_attention(family):
    """Attention rows of a bfloat16 model (softmax recomputed by interp in float32 from its bf16 q and k) against
    the eager attention weights of the same model in float32: they differ only by what bf16 weights and
    activations change upstream, well inside 0.03 on these tiny models (measured: 2e-4 llama and qwen2, 0.011 gemma3)."""
    from interp.models.tiny import tiny_random_hf

    m = _bf16_model(family)
    eager = tiny_random_hf(family, True, seed=0, attn_implementation="eager").eval()
    _, x, mask = left_padded()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        att = eager(input_ids=x, attention_mask=mask, position_ids=pos, output_attentions=True).attentions
    positions = [5, 9, 11]
    rows = interp.attention_rows(m, x, positions, attention_mask=mask)
    assert rows.dtype is torch.float32
    real = mask.bool()[:, positions]
    for layer, a in enumerate(att):
        diff = (rows[:, layer] - a[:, :, positions, :]).abs().amax(dim=(1, 3))[real]
        assert diff.max().item() <= 0.03, f"layer {layer}: {diff.max().item()}"
