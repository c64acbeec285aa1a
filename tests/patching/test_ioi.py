"""IOI pairs with each corruption (`ioi_pairs(corrupt=both|abc|s2)`), the IOI scores of `interp patch --task
ioi` (`interp.patching.ioi`: logit difference IO - S and accuracy with CIs, attention from the end to the names)
checked against an independent recomputation with transformers, and path patching in row chunks."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from interp.corpus import ioi
from interp.errors import InvalidInputError
from interp.patching import ioi_pairs
from interp.patching.pairs import IOI_CORRUPTIONS

from tests.helpers import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def _one(tok, name):
    ids = tok(" " + name, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, name
    return ids[0]


@pytest.fixture(scope="module")
def qwen(bundled):
    return bundled("tiny-qwen2")


@pytest.mark.parametrize("corrupt", ["abc", "s2"])
def test_abc_and_s2_pairs_name_three_distinct_people_and_differ_only_at_the_replaced_mentions(qwen, corrupt):
    from interp.tasks.niah import _bos

    tok = qwen.tokenizer
    bos = _bos(tok)  # the organisms' tokenizer adds <s>
    assert bos
    pairs = ioi_pairs(tok, n=24, seed=3, corrupt=corrupt)
    base = ioi_pairs(tok, n=24, seed=3)  # "both"
    items = ioi.ioi_prompts(24, seed=3, split="heldout")
    heldout = set(ioi.ioi_split().heldout_names)
    for p, b, item in zip(pairs, base, items):
        info = p.info
        assert p.clean == b.clean == bos + tok(item.prompt, add_special_tokens=False)["input_ids"]  # same clean prompts
        assert (info["io"], info["subject"], info["corrupt"]) == (item.io, item.subject, corrupt)
        assert p.answer == _one(tok, item.io) == info["io_token"] and p.wrong == _one(tok, item.subject) == info["s_token"]
        x_io, x_s1, x_s2 = info["corrupt_names"]
        assert len({x_io, x_s1, x_s2}) == 3 and {x_io, x_s1, x_s2} <= heldout  # three distinct names: none repeated
        assert info["corrupt_tokens"] == [_one(tok, x) for x in (x_io, x_s1, x_s2)]
        if corrupt == "abc":  # Wang et al.'s ABC: none of the clean names is left
            assert not {x_io, x_s1, x_s2} & {item.io, item.subject}
        else:  # s2: IO and S1 stay, the repeated mention is another name
            assert (x_io, x_s1) == (item.io, item.subject) and x_s2 not in (item.io, item.subject)
        a, b_ = (x_io, x_s1) if item.order == "ABBA" else (x_s1, x_io)
        text = ioi.TEMPLATES[item.template].format(A=a, B=b_, S=x_s2, **item.fill)
        assert p.corrupt == bos + tok(text, add_special_tokens=False)["input_ids"]
        # same length; the only differences are the replaced mentions, each one token of the new name
        L = len(p.clean)
        assert len(p.corrupt) == L
        diff = {j - L: t for j, (t, u) in enumerate(zip(p.corrupt, p.clean)) if t != u}
        slots = [info["io_position"], *info["s_positions"]]
        want = dict(zip(slots, info["corrupt_tokens"])) if corrupt == "abc" else {slots[2]: info["corrupt_tokens"][2]}
        assert diff == want
        assert p.clean[p.anchor] == p.answer and p.clean[L + info["s_positions"][1]] == p.wrong


def test_both_pairs_keep_their_prompts_and_metric_tokens(qwen):
    """The default corruption is unchanged: both names replaced, S' repeated; wrong = the corrupt IO."""
    tok = qwen.tokenizer
    for p in ioi_pairs(tok, n=12, seed=2):
        c_io, c_s1, c_s2 = p.info["corrupt_names"]
        assert c_s1 == c_s2 == p.info["corrupt_subject"] and c_io == p.info["corrupt_io"]
        assert p.wrong == _one(tok, c_io) and p.info["corrupt"] == "both"
        assert sum(a != b for a, b in zip(p.clean, p.corrupt)) == 3


def test_corruptions_need_enough_one_token_names_and_a_known_kind():
    names = set(ioi.ioi_split().heldout_names)
    keep = sorted(names)[:4]

    class Four:  # only four held-out names are one token (" Name" -> one id); everything else one id per character
        bos_token_id = None

        def __call__(self, text, add_special_tokens=False):
            out = []
            for piece in re.findall(r" ?[^ ]+| ", text):
                out += [1000 + keep.index(piece[1:])] if piece[1:] in keep else [ord(c) for c in piece]
            return {"input_ids": out}

    assert len(ioi_pairs(Four(), n=4, corrupt="both")) == 4
    with pytest.raises(InvalidInputError, match="'abc' corruption needs at least 5 names"):
        ioi_pairs(Four(), n=4, corrupt="abc")
    assert len(ioi_pairs(Four(), n=4, corrupt="s2")) == 4
    with pytest.raises(InvalidInputError, match="valid are both, abc, s2"):
        ioi_pairs(Four(), n=4, corrupt="abba")
    assert tuple(IOI_CORRUPTIONS) == ("both", "abc", "s2")


@pytest.mark.parametrize("corrupt", ["both", "abc"])
def test_ioi_scores_equal_an_independent_recomputation(qwen, corrupt):
    from transformers import AutoModelForCausalLM

    from interp.organisms.train import DATA_DIR
    from interp.patching.ioi import ioi_scores

    pairs = ioi_pairs(qwen.tokenizer, n=10, seed=1, corrupt=corrupt)
    got = ioi_scores(qwen, pairs, n_boot=200)
    hf = AutoModelForCausalLM.from_pretrained(str(DATA_DIR / "tiny-qwen2"), attn_implementation="eager").eval()
    clean, bad, own, att = [], [], [], []
    with torch.no_grad():
        for p in pairs:
            io, s = p.info["io_token"], p.info["s_token"]
            out = hf(input_ids=torch.tensor([p.clean]), output_attentions=True)
            lg = out.logits[0, -1]
            clean.append((lg[io] - lg[s]).item())
            lx = hf(input_ids=torch.tensor([p.corrupt])).logits[0, -1]
            bad.append((lx[io] - lx[s]).item())
            x_io, x_s = p.info["corrupt_tokens"][:2]
            own.append((lx[x_io] - lx[x_s]).item())
            L = len(p.clean)
            a = torch.stack(out.attentions)[:, 0, :, -1]  # [layer, head, key]
            att.append([a[:, :, L + j] for j in (p.info["io_position"], *p.info["s_positions"])])
    assert got["per_pair"]["clean"] == pytest.approx(clean, abs=1e-3)
    assert got["per_pair"]["corrupt"] == pytest.approx(bad, abs=1e-3)
    for key, v in (("clean", clean), ("corrupt", bad)):
        e = got[key]
        assert e["logit_diff"]["mean"] == pytest.approx(np.mean(v), abs=1e-3)
        assert e["accuracy"]["mean"] == pytest.approx(np.mean(np.array(v) > 0))
        assert e["logit_diff"]["lo"] <= e["logit_diff"]["mean"] <= e["logit_diff"]["hi"]
        assert e["logit_diff"]["n"] == 10
    if corrupt == "both":
        assert got["corrupt_own"]["logit_diff"]["mean"] == pytest.approx(np.mean(own), abs=1e-3)
    else:
        assert "corrupt_own" not in got
    for i, key in enumerate(("io", "s1", "s2")):
        want = torch.stack([a[i] for a in att]).mean(0)
        assert np.allclose(np.array(got["attention"][key]), want.numpy(), atol=1e-4)
    orders = {p.info["order"] for p in pairs}
    assert set(got["by_order"]) == orders and sum(v["logit_diff"]["n"] for v in got["by_order"].values()) == 10
    with pytest.raises(InvalidInputError, match="not an IOI pair"):
        ioi_scores(qwen, [type(pairs[0])(pairs[0].clean, pairs[0].corrupt, 1, 2)])


def test_patch_on_ioi_both_says_its_logit_difference_is_not_the_ioi_lines(tmp_path, capsys):
    """With corruption "both" the pairs' wrong token is the corrupt prompt's IO, so the patching metric is
    logit(IO) - logit(IO'), not the IOI line's logit(IO) - logit(S): the output says so beside each."""
    out = tmp_path / "both"
    code, _, err = run_cli(["patch", "-m", "tiny-qwen2", "--task", "ioi", "--n-pairs", "4", "--site", "resid_pre",
                            "--positions=-1", "--n-boot", "20", "--out", str(out)], capsys)
    assert code == 0, err
    assert "IOI (4 pairs, corruption both): logit(IO) - logit(S) (the clean prompt's names)" in err
    assert ("unpatched logit_diff = logit(IO) - logit(IO'), IO' the corrupt prompt's IO (the pairs' answer and wrong "
            "token; not the IOI line's logit(IO) - logit(S))") in err
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    assert all(p["wrong"] != p["info"]["s_token"] for p in pairs)


def test_patch_task_ioi_corrupt_abc_writes_its_scores_and_pairs(tmp_path, capsys):
    out = tmp_path / "abc"
    code, _, err = run_cli(["patch", "-m", "tiny-qwen2", "--task", "ioi", "--corrupt", "abc", "--n-pairs", "6",
                                 "--site", "resid_pre", "--positions=-1", "--n-boot", "100", "--out", str(out)], capsys)
    assert code == 0, err
    assert "IOI (6 pairs, corruption abc): logit(IO) - logit(S) (the clean prompt's names) clean" in err  # the report
    # the patching metric says what it is, here the IOI line's own difference
    assert "unpatched logit_diff = logit(IO) - logit(S), as on the IOI line" in err
    scores = json.loads((out / "ioi.json").read_text())
    res = json.loads((out / "patching.json").read_text())
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    assert scores["corrupt_kind"] == "abc" and scores["n_pairs"] == 6
    assert all(p["info"]["corrupt"] == "abc" and p["wrong"] == p["info"]["s_token"] for p in pairs)
    # the patching metric is IO - S here: its unpatched values are the scores' per-pair logit differences
    assert res["donor_value"] == pytest.approx(scores["per_pair"]["clean"], abs=1e-4)
    # pairs with a small or flipped gap: the headline adds each top cell's ratio of means, the largest first
    from interp.patching.run import pooled_effect, unstable_gaps

    shaky = unstable_gaps(res["donor_value"], res["base_value"])
    assert bool(shaky) == ("by the ratio of means" in err)
    if shaky:
        pool = pooled_effect(res, "resid_pre")
        layer = int(np.nanargmax(np.abs(pool[:, 0])))
        assert f"by the ratio of means (sum of patched - base over sum of gaps): L{layer} pos -1: " \
               f"{pool[layer, 0]:+.3f}" in " ".join(err.split())
    assert res["base_value"] == pytest.approx(scores["per_pair"]["corrupt"], abs=1e-4)
    code, _, err = run_cli(["patch", "-m", "tiny-qwen2", "--task", "ioi", "--corrupt", "s2", "--n-pairs", "16",
                            "--method", "path", "--senders", "L3H0,L3H2", "--via", "logits", "--n-boot", "50",
                            "--out", str(tmp_path / "path")], capsys)
    assert code == 0, err
    s2 = json.loads((tmp_path / "path" / "ioi.json").read_text())
    assert s2["corrupt_kind"] == "s2"
    # pairs whose clean - corrupt gap is small or flipped: the report adds the ratio of means to each sender
    from interp.patching.run import unstable_gaps

    shaky = unstable_gaps(s2["per_pair"]["clean"], s2["per_pair"]["corrupt"])
    assert shaky and "ratio of means" in err and f"{len(shaky)} of 16 pairs" in err


def test_path_patching_in_row_chunks_equals_one_pass():
    """Path patching runs its (pair, sender) rows in chunks (config.max_batch rows, default about 2k tokens on
    CPU): the effects do not depend on the chunking."""
    from interp.patching import PatchingConfig
    from interp.patching.path import run_path_patching

    from tests.patching.test_attribution import _induction_key_pairs, planted_model

    model = planted_model("qwen2")
    pairs = _induction_key_pairs()
    senders = ["L0H0", "L0H1", "L0H2"]
    for via, rcv in (("k", ["L1H1"]), ("logits", [])):
        one = run_path_patching(model, pairs, senders, rcv, via=via, config=PatchingConfig(n_boot=20))
        chunked = run_path_patching(model, pairs, senders, rcv, via=via, config=PatchingConfig(n_boot=20, max_batch=3))
        for name, e in one.effects.items():
            assert chunked.effects[name]["per_pair"] == pytest.approx(e["per_pair"], abs=1e-5, nan_ok=True)


def test_grid_agreement_of_atp_and_exact_over_every_head(qwen):
    """`grid_agreement` compares a whole AtP grid with a whole exact grid (what --verify-top checks on a few
    cells): its numbers equal a recomputation from the two grids; a grid agrees perfectly with itself."""
    from scipy import stats as sps

    from interp.patching import PatchingConfig, run_attribution, run_patching
    from interp.patching.attribution import grid_agreement

    pairs = ioi_pairs(qwen.tokenizer, n=6, seed=0, corrupt="abc")
    cfg = PatchingConfig(sites=("head_out",), n_boot=20)
    exact = run_patching(qwen, pairs, cfg)
    est = run_attribution(qwen, pairs, cfg, method="atp-qk", verify_top=0, verify_sample=0)
    got = grid_agreement(est, exact, "head_out", ks=(5, 10))
    a, e = (np.array(r.sites["head_out"].mean, dtype=float).ravel() for r in (est, exact))
    assert got["n_cells"] == a.size == 32
    assert got["pearson"] == pytest.approx(np.corrcoef(a, e)[0, 1], abs=1e-9)
    assert got["spearman"] == pytest.approx(sps.spearmanr(a, e)[0], abs=1e-9)
    for k in (5, 10):
        te, ta = set(np.argsort(-np.abs(e))[:k]), set(np.argsort(-np.abs(a))[:k])
        t = got["top_k"][str(k)]
        assert t["recall"] == pytest.approx(len(te & ta) / k)
        assert len(t["exact_top"]) == k and len(t["missed"]) == k - len(te & ta)
        assert abs(t["exact_top"][0]["exact"]) == pytest.approx(np.abs(e).max())
    assert got["slope"] == pytest.approx(float((a * e).sum() / (e * e).sum()))  # estimate ~ slope x exact
    assert abs(got["largest_misses"][0]["estimate"] - got["largest_misses"][0]["exact"]) == \
        pytest.approx(np.abs(a - e).max())
    same = grid_agreement(exact, exact.to_dict(), "head_out", ks=(10,))
    assert same["pearson"] == pytest.approx(1.0) and same["top_k"]["10"]["recall"] == 1.0
    assert same["slope"] == pytest.approx(1.0) and same["ratio_top"]["median"] == pytest.approx(1.0)
    with pytest.raises(InvalidInputError, match="no 'resid_pre' grid"):
        grid_agreement(est, exact, "resid_pre")
    other = run_patching(qwen, pairs[:5], cfg)
    with pytest.raises(InvalidInputError, match="not of the same pairs"):
        grid_agreement(est, other, "head_out")


def test_pooled_effect_is_the_ratio_of_means_and_unstable_gaps_flag_small_or_flipped_pairs():
    from interp.patching.run import pooled_effect, site_effect, unstable_gaps

    donor, base = [2.0, 0.1, -1.0, 3.0], [0.0, 0.0, 0.0, 0.5]
    gap = np.array(donor) - np.array(base)  # 2, 0.1, -1, 2.5: mean 0.9
    change = np.array([[1.0, 0.5], [0.5, 0.0], [0.5, np.nan], [2.5, 1.0]])  # patched - base per pair and cell
    d = {"normalized": True, "donor_value": donor, "base_value": base,
         "sites": {"head_out": {"per_pair": (change / gap[:, None])[:, None, :].tolist()}}}
    got = pooled_effect(d, "head_out")
    assert got.shape == (1, 2)
    assert got[0, 0] == pytest.approx(change[:, 0].sum() / gap.sum())
    assert got[0, 1] == pytest.approx((0.5 + 0.0 + 1.0) / (2.0 + 0.1 + 2.5))  # the pair without the cell left out
    per_pair_mean, _ = site_effect(d, "head_out")
    assert per_pair_mean[0, 0] == pytest.approx(np.mean(change[:, 0] / gap))  # 5.0 from pair 1 alone: unstable
    assert unstable_gaps(donor, base) == [1, 2]  # 0.1 < 0.9 / 4; -1 has the other sign
    assert unstable_gaps([1.0, 1.1, 0.9], [0.0, 0.0, 0.0]) == []
    with pytest.raises(InvalidInputError, match="normalised"):
        pooled_effect({**d, "normalized": False}, "head_out")


def test_ratio_of_means_by_hand():
    """The ratio of means (path patching's printout and pooled_effect share it): sum of (patched - base) over sum
    of gaps, over the pairs that have the cell, per cell."""
    import numpy as np

    from interp.patching.result import ratio_of_means

    per = np.array([[0.5, np.nan], [np.nan, 1.0], [2.0, 3.0]])  # normalised: (patched - base) / gap
    donor, base = np.array([2.0, 1.0, 0.5]), np.array([0.0, 0.0, 0.0])
    want0 = (0.5 * 2.0 + 2.0 * 0.5) / (2.0 + 0.5)
    want1 = (1.0 * 1.0 + 3.0 * 0.5) / (1.0 + 0.5)
    assert np.allclose(ratio_of_means(per, donor, base), [want0, want1])
    assert np.isnan(ratio_of_means(np.array([np.nan, np.nan]), donor[:2], base[:2]))
