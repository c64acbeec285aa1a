"""Shared builders for tests: pairs of identical tiny models, one plain HF, one wrapped."""

import sys
from pathlib import Path

import torch

import interp
from interp.models.tiny import GQA_FAMILIES, TINY_FAMILIES, VOCAB, tiny_random_hf

# (family, gqa) for every adapter, MHA everywhere and GQA where the architecture has it
VARIANTS = [(f, False) for f in TINY_FAMILIES] + [(f, True) for f in GQA_FAMILIES]
VARIANT_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in VARIANTS]
DECODERS = [(f, g) for f, g in VARIANTS if f != "bert"]
DECODER_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in DECODERS]
FAST_DECODERS = ("llama-gqa", "gpt2-mha")  # the fast tier's pair: RoPE with GQA, learned positions with MHA


def decoder_params(fast=FAST_DECODERS):
    """DECODERS as pytest params, those not in `fast` marked slow: a heavy equality checked on every decoder
    architecture by `make test`, on two by `make test-fast`."""
    import pytest

    return [pytest.param(f, g, id=i, marks=() if i in fast else pytest.mark.slow)
            for (f, g), i in zip(DECODERS, DECODER_IDS)]


def pair(family, gqa, impl=None):
    """(plain HF model, interp.Model) with identical seeded weights."""
    plain = tiny_random_hf(family, gqa, seed=0, attn_implementation=impl)
    wrapped = interp.Model(tiny_random_hf(family, gqa, seed=0, attn_implementation=impl))
    return plain, wrapped


def eager(family, gqa):
    return tiny_random_hf(family, gqa, seed=0, attn_implementation="eager")


def ids(batch=2, seq=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=g)


def left_padded(seed=2):
    """A batch of 3 sequences of lengths 12, 7, 3, left-padded with token 0."""
    g = torch.Generator().manual_seed(seed)
    lens = [12, 7, 3]
    seqs = [torch.randint(3, VOCAB, (n,), generator=g) for n in lens]
    out = torch.zeros(3, 12, dtype=torch.long)
    mask = torch.zeros(3, 12, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, 12 - len(s):] = s
        mask[i, 12 - len(s):] = 1
    return seqs, out, mask


def hf_out(hf, input_ids, mask=None, **kw):
    """Plain HF forward with position ids derived from the mask (the convention interp uses)."""
    if mask is None:
        mask = torch.ones_like(input_ids)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return hf(input_ids=input_ids, attention_mask=mask, position_ids=pos, **kw)


def logits_of(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def run_cli(args, capsys):
    """Run the CLI in-process: (exit code, stdout, stderr with whitespace folded)."""
    from interp.cli import main

    code = 0
    try:
        main(args)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, " ".join(out.err.split())


def tl_bridge(family, gqa, tmp_path, hf=None):
    """A TransformerLens TransformerBridge on its own seeded tiny model, or on `hf` (a word tokenizer saved
    to tmp_path: the bridge reloads it by name), and that HF model. The bridge rewires the HF model in place."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", pad_token="t0", bos_token="t1",
                            eos_token="t2").save_pretrained(tmp_path)
    tok = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    hf = hf if hf is not None else tiny_random_hf(family, gqa=gqa, seed=0)
    hf.config.architectures = [type(hf).__name__]
    br = TransformerBridge.boot_transformers(family, hf_model=hf, tokenizer=tok, device="cpu")
    br.eval()
    return br, hf


def write_gguf(path, arch: str, tokenizer: bool = True):
    """A small GGUF file of llama.cpp's format (gguf's writer): architecture `arch`, one layer of header fields,
    a tokenizer (3 tokens) when `tokenizer`, and one 64 x 64 float32 tensor. For the bad-input tests: what
    transformers and interp make of its header, not a model that runs."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(["a", "b", "c"])
        w.add_token_types([1, 1, 1])
        w.add_token_merges([])
    w.add_tensor("token_embd.weight", np.zeros((64, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_gguf_model(path, drop: tuple[str, ...] = (), layers: int = 2, extra_layers: int = 0,
                     keep: tuple[str, ...] | None = None, reshape: dict | None = None):
    """A complete tiny llama GGUF (hidden 32, 4 heads / 2 KV heads, `layers` layers, a 29-character vocabulary,
    float32 weights) that transformers and interp load as a working model, less the tensors named in `drop`
    (llama.cpp names: "blk.1.ffn_down.weight"); `extra_layers` writes the tensors of that many more layers than
    the header's block count; `keep`: write only these tensors; `reshape`: {name: shape} written in a shape the
    header contradicts. For the tests that a damaged GGUF never becomes a model."""
    import gguf
    import numpy as np

    tokens = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [" ", ".", ","]
    d, ffn, heads, kv = 32, 64, 4, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_merges([])
    kvd = kv * d // heads
    shapes = {"token_embd.weight": (len(tokens), d), "output_norm.weight": (d,), "output.weight": (len(tokens), d)}
    for i in range(layers + extra_layers):
        shapes.update({f"blk.{i}.attn_norm.weight": (d,), f"blk.{i}.attn_q.weight": (d, d),
                       f"blk.{i}.attn_k.weight": (kvd, d), f"blk.{i}.attn_v.weight": (kvd, d),
                       f"blk.{i}.attn_output.weight": (d, d), f"blk.{i}.ffn_norm.weight": (d,),
                       f"blk.{i}.ffn_gate.weight": (ffn, d), f"blk.{i}.ffn_up.weight": (ffn, d),
                       f"blk.{i}.ffn_down.weight": (d, ffn)})
    assert set(drop) | set(reshape or {}) <= set(shapes), set(drop) - set(shapes)
    shapes.update(reshape or {})
    rng = np.random.default_rng(0)
    for name, shape in shapes.items():
        if name not in drop and (keep is None or name in keep):
            w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


ORGANISM_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "organisms" / "tokenizer"
# short texts of the organisms' corpus style, of different lengths (the store and probe tests)
TEXTS = [" The red lantern stood near the old bridge.", " Alice found 12 coins.",
         " Bob and Carol walked to the market at dawn and bought a tiny brass compass.", " Hi."] * 3


def make_checkpoint(path: Path, seed: int = 0, layers: int = 2) -> Path:
    """A tiny random Qwen2 (GQA) saved as a local checkpoint with the organisms' tokenizer (once per path)."""
    import shutil

    import transformers as tf

    if (path / "config.json").is_file():
        return path
    cfg = tf.Qwen2Config(vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False)
    torch.manual_seed(seed)
    tf.AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ORGANISM_TOKENIZER / f, path / f)
    return path


def o_proj_zeroed_logits(hf, heads, head_dim: int, x) -> torch.Tensor:
    """The reference for head ablation: the logits of `hf` (a Llama/Qwen/Gemma-style transformers model) on `x`
    with the heads' slices of each layer's o_proj input zeroed by plain torch forward pre-hooks.
    `heads`: head ids in any form interp takes ("L3H2", HeadId, ...)."""
    from interp.sites import as_heads

    by_layer: dict[int, list[int]] = {}
    for h in as_heads(heads):
        by_layer.setdefault(h.layer, []).append(h.head)

    def zero(hs):
        def pre(module, args):
            z = args[0].clone()
            for h in hs:
                z[..., h * head_dim:(h + 1) * head_dim] = 0
            return (z,) + args[1:]
        return pre

    handles = [hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero(hs))
               for layer, hs in by_layer.items()]
    try:
        with torch.no_grad():
            return hf(x).logits
    finally:
        for h in handles:
            h.remove()


def attn_modules(hf):
    """The attention module of every layer of a plain HF decoder (Llama-like or GPT-NeoX)."""
    layers = hf.model.layers if hasattr(hf, "model") else hf.gpt_neox.layers
    return [getattr(l, "self_attn", None) or l.attention for l in layers]


def rope_hooked_logits(plain, x, mask, layer: int, fn):
    """Logits of plain HF with its apply_rotary_pos_emb replaced, at layer `layer` only, by
    `fn(orig, q, k, cos, sin, *a, **kw)` (other layers call the original): the independent reference of the RoPE
    interventions."""
    attn = attn_modules(plain)
    mod = sys.modules[type(attn[0]).__module__]
    orig, current = mod.apply_rotary_pos_emb, [None]

    def patched(q, k, cos, sin, *a, **kw):
        return fn(orig, q, k, cos, sin, *a, **kw) if current[0] == layer else orig(q, k, cos, sin, *a, **kw)

    hooks = [m.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i)) for i, m in enumerate(attn)]
    mod.apply_rotary_pos_emb = patched
    try:
        return hf_out(plain, x, mask).logits
    finally:
        mod.apply_rotary_pos_emb = orig
        for h in hooks:
            h.remove()
