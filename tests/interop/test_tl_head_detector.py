"""Agreement with TransformerLens's head detector (`transformer_lens.head_detector.detect_head`).

TL scores a head by `error_measure="mul"`: sum(A * D) / sum(A) over all query/key pairs of one
prompt, D the detection pattern built from the prompt's tokens, averaged over a list of prompts.
interp reports that number as `tl_scores` (and the same mass averaged over the queries that have a
target as `scores`). Both run on the same model weights and the same token ids: TL's
`TransformerBridge` wraps a separate copy of the HF model (eager attention), and prompts are given
to TL as strings of one whitespace-separated word per token id (letters only, so the tokenizer's
special-token matching cannot split them; TL prepends BOS itself).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformer_lens")
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformer_lens.head_detector import detect_head  # noqa: E402
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

import interp  # noqa: E402
from interp.analyses.induction import (InductionConfig, detect_induction_heads, detection_patterns,  # noqa: E402
                                       pattern_scores)
from interp.tasks.repeated import RepeatedConfig, build_repeated_batches  # noqa: E402
from interp.models.tiny import VOCAB, tiny_random_hf  # noqa: E402

from tests.planted import BOS, CONTENT, planted_hf  # noqa: E402

TL_NAMES = {"prev_token": "previous_token_head", "duplicate": "duplicate_token_head", "induction": "induction_head"}
TOL = 1e-5


def _word(i: int) -> str:
    return "w" + chr(97 + i // 26) + chr(97 + i % 26)


def _tokenizer(vocab: int, path):
    tk = Tokenizer(models.WordLevel(vocab={_word(i): i for i in range(vocab)}, unk_token=_word(0)))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token=_word(0), pad_token=_word(0), bos_token=_word(BOS),
                                  eos_token=_word(2))
    tok.save_pretrained(path)
    return PreTrainedTokenizerFast.from_pretrained(path)  # the bridge re-loads it from name_or_path


def _bridge(hf, tok):
    hf.config.architectures = [type(hf).__name__]
    br = TransformerBridge.boot_transformers("interp-test", hf_model=hf, tokenizer=tok, device="cpu")
    br.eval()
    return br


def _text(row: torch.Tensor) -> str:
    assert int(row[0]) == BOS
    return " ".join(_word(int(t)) for t in row[1:])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_analysis_tl_scores_equal_detect_head(family, tmp_path):
    tok = _tokenizer(24, tmp_path)
    model = interp.Model(planted_hf(family))
    br = _bridge(planted_hf(family), tok)
    cfg = InductionConfig(repeated=RepeatedConfig(lengths=(8,), n_seqs=3, seed=5), tokens=CONTENT, bos_id=BOS,
                          draws=0, copy_tokens=None, n_boot=200, n_perm=200)
    d = detect_induction_heads(model, cfg).to_dict()
    ids = build_repeated_batches(CONTENT, cfg.repeated, BOS)[0].ids  # the sequences the analysis used
    texts = [_text(r) for r in ids]
    assert torch.equal(br.to_tokens(texts[0])[0].cpu(), ids[0])
    for ours, theirs in TL_NAMES.items():
        with torch.no_grad():
            tl = detect_head(br, texts, theirs)
        np.testing.assert_allclose(np.array(d["tl_scores"][ours]), tl.numpy(), atol=TOL, err_msg=ours)
    # the planted heads are what TL finds too
    assert tuple(np.unravel_index(np.argmax(d["tl_scores"]["induction"]), (3, 4))) == (1, 1)
    assert tuple(np.unravel_index(np.argmax(d["tl_scores"]["prev_token"]), (3, 4))) == (0, 0)


@pytest.mark.parametrize("exclude_bos,exclude_current", [(False, False), (True, False), (False, True), (True, True)])
def test_pattern_scores_equal_detect_head_on_arbitrary_text(exclude_bos, exclude_current, tmp_path):
    """A random-weight GPT-2 on random tokens from a small range (many duplicates), every TL flag."""
    tok = _tokenizer(VOCAB, tmp_path)
    model = interp.Model(tiny_random_hf("gpt2", seed=0))
    br = _bridge(tiny_random_hf("gpt2", seed=0), tok)
    g = torch.Generator().manual_seed(4)
    ids = torch.cat([torch.full((2, 1), BOS), torch.randint(3, 12, (2, 17), generator=g)], dim=1)
    rows = interp.attention_rows(model, ids, list(range(ids.shape[1])))  # [b, L, H, s, s]
    pats = detection_patterns(ids)
    for ours, theirs in TL_NAMES.items():
        for b in range(ids.shape[0]):
            _, tl_ours = pattern_scores(rows[b], pats[ours][b:b + 1].expand(model.spec.n_layers, -1, -1),
                                        exclude_bos=exclude_bos, exclude_current=exclude_current)
            with torch.no_grad():
                tl = detect_head(br, _text(ids[b]), theirs, exclude_bos=exclude_bos,
                                 exclude_current_token=exclude_current)
            np.testing.assert_allclose(tl_ours.numpy(), tl.numpy(), atol=TOL, err_msg=f"{ours} row {b}")
            assert tl.min() >= 0 and tl.max() > 0.01  # real scores, not the -1 of unscored heads
