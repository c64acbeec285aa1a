"""Shared builders for tests: pairs of identical tiny models, one plain HF, one wrapped."""

import torch

import interp
from interp.tiny import GQA_FAMILIES, TINY_FAMILIES, VOCAB, tiny_random_hf

# (family, gqa) for every adapter, MHA everywhere and GQA where the architecture has it
VARIANTS = [(f, False) for f in TINY_FAMILIES] + [(f, True) for f in GQA_FAMILIES]
VARIANT_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in VARIANTS]
DECODERS = [(f, g) for f, g in VARIANTS if f != "bert"]
DECODER_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in DECODERS]


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
