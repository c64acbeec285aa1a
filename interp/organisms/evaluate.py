"""Evaluation of the model organisms: NIAH recall and in-context copying.

``python -m interp.organisms eval tiny-qwen2`` measures both, stores the numbers
in ``organism.json`` and re-renders the model card and the index README.

* NIAH: one needle in filler text, needle at depth 0, 0.25, 0.5, 0.75, 1.0,
  prompt lengths up to the longest trained length; greedy decoding of
  ``MAX_NEW_TOKENS`` tokens; a hit when ``answer.strip()`` (the code word) is in
  the decoded continuation.  Prompts come from held-out integer seeds
  (``corpus.heldout_seed``), never used in training.
* Copy: ``<s> R R`` with ``R`` = ``COPY_LEN`` token ids drawn uniformly (held-out
  torch seed) from the ids that occur in a held-out corpus sample; mean
  next-token loss on the first copy vs the second (both excluding their first
  token); the gap is first minus second, in nats.
* Random-id copy: the same measurement with ``RANDOM_ID_SEQS`` sequences of
  ``RANDOM_ID_LEN`` ids drawn uniformly from ALL ids ``10 .. V-11`` (``V`` the vocabulary size; ids
  the corpus rarely or never uses), against the uniform loss ln(V - 20): a model that copies
  in-context tokens whatever they are has a large gap, and a first copy near uniform says it
  does not rule ids out by their corpus frequency. Targets: gap >= 3 nats, first copy within
  1.5 nats of uniform.
* IOI (indirect-object identification, :mod:`interp.corpus.ioi`): ``IOI_PROMPTS`` prompts from the
  held-out names x held-out templates; logit of the indirect object minus logit of the subject
  at the last prompt token (mean, sample std, n) and accuracy (fraction IO > S; chance 0.5).
  The v1 organisms were never trained on IOI.
* Control strength: the retrieval heads detected on the README's grid (512/1024 tokens where
  trained, else the longest trained length; 5 depths x 8 seeds; threshold 0.1), the
  ``CONTROL_DRAWS`` layer-matched random sets ``interp ablate`` draws for them (seed 0), and how
  many distinct sets write >= 0.5x the median head (mean relative write norm of the set's heads,
  on the first 8 NIAH prompts, as ``interp ablate`` measures it): a control that writes little
  into the residual stream is a weak control.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from interp import corpus
from interp.organisms.tokenizer import load_tokenizer, token_counter

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_NEW_TOKENS = 6
COPY_LEN = 128
COPY_SEQS = 64
TARGET_RECALL = 0.95
TARGET_COPY_GAP = 3.0
RANDOM_ID_LEN = 40
RANDOM_ID_SEQS = 16
RANDOM_ID_MARGIN = 10  # ids MARGIN .. V-MARGIN-1: V - 2*MARGIN ids
TARGET_RANDOM_ID_GAP = 3.0
TARGET_RANDOM_ID_UNIFORM = 1.5  # |first-copy loss - ln(V - 20)| at most this
IOI_PROMPTS = 192
TARGET_IOI_LOGIT_DIFF = 2.0  # the v2 target: held-out mean logit(IO) - logit(S) at least this ...
TARGET_IOI_ACCURACY = 0.9  # ... and IO > S on at least this fraction (on at least one organism)
TARGET_RETRIEVAL_FRACTION = 0.25  # retrieval heads fewer than this fraction of all heads
TARGET_STRONG_CONTROLS = 3  # aim: at least this many distinct layer-matched sets writing >= CONTROL_MIN_REL
CONTROL_DRAWS = 10
CONTROL_MIN_REL = 0.5
CONTROL_LENGTHS = (512, 1024)
CONTROL_SEEDS = 8
CONTROL_THRESHOLD = 0.1


def load_organism(path: str | Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="sdpa")
    model.eval()
    return model, load_tokenizer(path)


def default_lengths(max_len: int) -> list[int]:
    return sorted({n for n in (256, 512, 1024, 2048) if n < max_len} | {max_len})


@torch.no_grad()
def greedy(model, ids: list[int], max_new_tokens: int = MAX_NEW_TOKENS) -> list[int]:
    # transformers >= 5.2x names the KV cache ``cache``; older versions ``past_key_values``
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    # learned absolute positions (gpt2) end at n_positions: stop there instead of indexing past the table
    limit = getattr(model.config, "n_positions", None) if model.config.model_type == "gpt2" else None
    if limit is not None:
        max_new_tokens = max(1, min(max_new_tokens, limit - len(ids) + 1))
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    new = []
    nxt = out.logits[0, -1].argmax().item()
    for i in range(max_new_tokens):
        new.append(nxt)
        if i + 1 == max_new_tokens:
            break
        out = model(input_ids=torch.tensor([[nxt]]), use_cache=True, **{key: out[key]})
        nxt = out.logits[0, -1].argmax().item()
    return new


def niah_eval(model, tok, lengths: Sequence[int], depths: Sequence[float] = DEPTHS,
              n_per_cell: int = 20, log=print) -> dict:
    count = token_counter(tok)
    answer_len = max(count(" " + w) for w in corpus.CODE_WORDS)
    cells: dict[str, dict[str, float]] = {}
    hits_all = total_all = prefix_all = 0
    prefix_by_len: dict[str, float] = {}
    failures = []
    for li, length in enumerate(lengths):
        cells[str(length)] = {}
        prefix_len = 0
        for di, depth in enumerate(depths):
            hits = 0
            for i in range(n_per_cell):
                seed = corpus.heldout_seed(li * 100_000 + di * 1_000 + i)
                # leave room for <s> and the answer so prompt + answer <= length
                p = corpus.make_niah_prompt(depth, seed, n_tokens=length - 1 - answer_len,
                                            count_tokens=count)
                ids = tok.encode(p["prompt"]).ids
                out = tok.decode(greedy(model, ids))
                ok = p["answer"].strip() in out
                hits += ok
                prefix_len += out.startswith(p["answer"])
                if not ok and len(failures) < 10:
                    failures.append({"length": length, "depth": depth, "seed": seed,
                                     "answer": p["answer"], "output": out})
            cells[str(length)][str(depth)] = hits / n_per_cell
            hits_all += hits
            total_all += n_per_cell
        prefix_by_len[str(length)] = prefix_len / (n_per_cell * len(depths))
        prefix_all += prefix_len
        log(f"  NIAH len {length}: " + " ".join(f"d{d}={v:.2f}" for d, v in cells[str(length)].items()))
    by_len = {k: sum(v.values()) / len(v) for k, v in cells.items()}
    by_depth = {str(d): sum(cells[str(n)][str(d)] for n in lengths) / len(lengths) for d in depths}
    return {"recall": hits_all / total_all, "by_length": by_len, "by_depth": by_depth,
            "cells": cells, "n_per_cell": n_per_cell, "lengths": list(lengths),
            "depths": list(depths), "max_new_tokens": MAX_NEW_TOKENS, "failures": failures,
            "exact_prefix": prefix_all / total_all, "exact_prefix_by_length": prefix_by_len}


def corpus_token_ids(tok, n_docs: int = 300) -> list[int]:
    """Ids occurring in a held-out corpus sample (special tokens excluded)."""
    seen = set()
    for i in range(n_docs):
        for text in corpus.sample_text(corpus.heldout_seed(900_000 + i), 1):
            seen.update(tok.encode(text, add_special_tokens=False).ids)
    return sorted(seen)


@torch.no_grad()
def _repeat_losses(model, ids: torch.Tensor, g: torch.Generator, bos: int | None, seq_len: int, n_seqs: int,
                   batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``<s> R R`` for ``n_seqs`` draws of ``R`` (``seq_len`` entries of ``ids``, uniform, from ``g``): per
    sequence, the mean next-token loss on the first copy and on the second, each without its first token.
    ``bos=None``: ``R R`` without ``<s>`` (a diagnostic only: the organisms always saw ``<s>`` first)."""
    first, second = [], []
    p = 0 if bos is None else 1
    for start in range(0, n_seqs, batch):
        b = min(batch, n_seqs - start)
        r = ids[torch.randint(len(ids), (b, seq_len), generator=g)]
        x = torch.cat(([] if bos is None else [torch.full((b, 1), bos)]) + [r, r], dim=1)
        logits = model(input_ids=x).logits[:, :-1]
        nll = F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
        # target positions in x[:, 1:] (with <s>): first copy 0..L-1, second copy L..2L-1; without <s> the
        # first copy's first token is no target, so both shift down by one
        first.append(nll[:, p:seq_len - 1 + p].mean(1))
        second.append(nll[:, seq_len + p:].mean(1))
    return torch.cat(first), torch.cat(second)


@torch.no_grad()
def copy_eval(model, tok, seq_len: int = COPY_LEN, n_seqs: int = COPY_SEQS, batch: int = 16) -> dict:
    ids = torch.tensor(corpus_token_ids(tok))
    g = torch.Generator().manual_seed(corpus.heldout_seed(950_000))
    f, s = _repeat_losses(model, ids, g, tok.token_to_id("<s>"), seq_len, n_seqs, batch)
    return {"first_copy_loss": f.mean().item(), "second_copy_loss": s.mean().item(),
            "gap_nats": (f - s).mean().item(), "seq_len": seq_len, "n_seqs": n_seqs,
            "n_candidate_ids": len(ids)}


def random_id_sequences(vocab_size: int, seq_len: int = RANDOM_ID_LEN, n_seqs: int = RANDOM_ID_SEQS,
                        margin: int = RANDOM_ID_MARGIN) -> tuple[torch.Tensor, torch.Generator]:
    """The id pool (``margin .. vocab_size - margin - 1``) and the seeded generator of the random-id eval."""
    if vocab_size - 2 * margin < 2:
        raise ValueError(f"a vocabulary of {vocab_size} ids has no random-id pool with margin {margin}")
    ids = torch.arange(margin, vocab_size - margin)
    return ids, torch.Generator().manual_seed(corpus.heldout_seed(960_000))


@torch.no_grad()
def random_id_eval(model, tok, seq_len: int = RANDOM_ID_LEN, n_seqs: int = RANDOM_ID_SEQS,
                   margin: int = RANDOM_ID_MARGIN, batch: int = 16) -> dict:
    """Copying of uniformly random ids (any id but the first and last ``margin``), first vs second copy,
    against the uniform loss ln(V - 2 margin)."""
    import math

    vocab = tok.get_vocab_size()
    ids, g = random_id_sequences(vocab, seq_len, n_seqs, margin)
    f, s = _repeat_losses(model, ids, g, tok.token_to_id("<s>"), seq_len, n_seqs, batch)
    uniform = math.log(len(ids))
    first = f.mean().item()
    # the same sequences without <s> (how the issue first measured it; the organisms never saw that)
    ids, g = random_id_sequences(vocab, seq_len, n_seqs, margin)
    f2, s2 = _repeat_losses(model, ids, g, None, seq_len, n_seqs, batch)
    return {"first_copy_loss": first, "second_copy_loss": s.mean().item(), "gap_nats": (f - s).mean().item(),
            "uniform_loss": uniform, "first_minus_uniform": first - uniform, "seq_len": seq_len,
            "n_seqs": n_seqs, "id_range": [margin, vocab - margin - 1], "vocab_size": vocab,
            "without_bos": {"first_copy_loss": f2.mean().item(), "second_copy_loss": s2.mean().item(),
                            "gap_nats": (f2 - s2).mean().item()}}


def _stats(x: list[float]) -> dict:
    import statistics

    return {"mean": statistics.fmean(x), "std": statistics.stdev(x) if len(x) > 1 else 0.0, "n": len(x)}


@torch.no_grad()
def ioi_eval(model, tok, n: int = IOI_PROMPTS, seed: int = 0) -> dict:
    """IOI logit difference (IO - S at the last prompt token) and accuracy on held-out names x held-out
    templates (``interp.corpus.ioi``); also the probability on IO + S and on any corpus name there."""
    from interp.corpus.ioi import ioi_prompts, ioi_split

    sp = ioi_split()

    def one(name):
        t = tok.encode(" " + name, add_special_tokens=False).ids
        if len(t) != 1:
            raise ValueError(f"IOI name {name!r} is {len(t)} tokens with this tokenizer; the eval compares one token")
        return t[0]

    name_ids = torch.tensor(sorted({one(x) for x in corpus.NAMES}))

    def measure(prompts):
        rows = []
        for p in prompts:
            logits = model(input_ids=torch.tensor([tok.encode(p.prompt).ids])).logits[0, -1].float()
            probs = logits.softmax(-1)
            io, s = one(p.io), one(p.subject)
            rows.append((p.order, (logits[io] - logits[s]).item(), (probs[io] + probs[s]).item(),
                         probs[name_ids].sum().item()))
        return rows

    rows = measure(ioi_prompts(n, seed, "heldout"))
    # diagnostic: the same on the TRAIN names x the six fixed train templates (what an IOI-trained build saw,
    # or close to it): learned in distribution but not carried to held-out templates shows up here
    train_rows = measure(ioi_prompts(max(2, n // 2), seed, "train"))

    def summary(rs):
        d = [r[1] for r in rs]
        return {"logit_diff": _stats(d), "accuracy": sum(v > 0 for v in d) / len(d),
                "p_io_plus_s": sum(r[2] for r in rs) / len(rs), "p_any_name": sum(r[3] for r in rs) / len(rs)}

    def by_order(rs):
        return {o: summary([r for r in rs if r[0] == o]) for o in ("ABBA", "BABA")}

    return {**summary(rows), "by_order": by_order(rows),
            "train_split": {**summary(train_rows), "by_order": by_order(train_rows), "n_prompts": len(train_rows)},
            "n_prompts": len(rows), "seed": seed, "split": "held-out names x held-out templates",
            "names": list(sp.heldout_names), "templates": list(sp.heldout_templates)}


def control_eval(path, max_len: int, draws: int = CONTROL_DRAWS, seed: int = 0, min_rel: float = CONTROL_MIN_REL,
                 n_seeds: int = CONTROL_SEEDS, threshold: float = CONTROL_THRESHOLD) -> dict:
    """How strong the layer-matched random controls of `interp ablate --heads retrieval` are: the retrieval
    heads detected on the README's grid, `draws` layer-matched sets (seed `seed`), the distinct ones and
    how many write >= `min_rel` x the median head (`experiments.control_write_strength`)."""
    from interp.models import loading
    from interp.analyses.heads import resolve_heads
    from interp.experiments import NiahTask, control_write_strength, random_head_controls, write_norms
    from interp.tasks.niah import NiahConfig, resolve_niah

    m = loading.load_model(str(path))
    lengths = tuple(n for n in CONTROL_LENGTHS if n <= max_len) or (max_len,)
    if m.spec.positional == "learned" and m.spec.max_positions:
        # no position embedding past max_positions: leave the room NIAH's context check asks for the answer
        from interp.tasks.niah import DECODE_ROOM

        lengths = tuple(sorted({min(n, m.spec.max_positions - DECODE_ROOM) for n in lengths}))
    niah = resolve_niah(m, NiahConfig(context_lengths=lengths, n_seeds=n_seeds))
    sel = resolve_heads("retrieval", m, niah=niah, threshold=threshold)
    grid = {"context_lengths": list(niah.context_lengths), "depths": list(niah.depths), "n_seeds": niah.n_seeds,
            "threshold": threshold, "needles": niah.needles}
    n_total = m.spec.n_layers * m.spec.n_heads
    out = {"target_heads": [str(h) for h in sel.heads], "target_source": sel.source, "detection": grid,
           "n_heads_total": n_total, "retrieval_fraction": len(sel.heads) / n_total,
           "baseline_recall": (sel.detection or {}).get("baseline_recall")}
    if not sel.heads:
        return {**out, "n_draws": draws, "distinct_sets": 0, "strong_sets": 0, "min_rel": min_rel, "sets": [],
                "note": "no retrieval heads detected: no controls to draw"}
    task = NiahTask.build(m.tokenizer, niah)
    writes = write_norms(m, task.inputs(8))
    ctl = random_head_controls(sel.heads, m.spec, lambda hs: (), draws, seed, "layer")
    return {**out, "target_head_write_rel": writes.relative(sel.heads), "seed": seed,
            **control_write_strength(ctl, writes, min_rel)}


def evaluate(path: str | Path, lengths: Sequence[int] | None = None,
             n_per_cell: int = 20, threads: int = 1, write: bool = True,
             command: str | None = None, log=print, ioi_prompts: int = IOI_PROMPTS,
             control_draws: int = CONTROL_DRAWS) -> dict:
    from interp.organisms.card import write_card, write_index
    from interp.organisms.train import DATA_DIR, INFO_FILE

    torch.set_num_threads(threads)
    path = Path(path)
    info_path = path / INFO_FILE
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    model, tok = load_organism(path)
    max_len = info.get("config", {}).get("curriculum")
    max_len = max(c[0] for c in max_len) if max_len else 1024
    lengths = list(lengths or default_lengths(max_len))
    t0 = time.time()
    niah = niah_eval(model, tok, lengths, n_per_cell=n_per_cell, log=log)
    cp = copy_eval(model, tok)
    log(f"  copy: first {cp['first_copy_loss']:.3f} second {cp['second_copy_loss']:.3f} "
        f"gap {cp['gap_nats']:.3f} nats")
    rid = random_id_eval(model, tok)
    log(f"  random-id copy: first {rid['first_copy_loss']:.3f} second {rid['second_copy_loss']:.3f} "
        f"gap {rid['gap_nats']:.3f} nats; uniform {rid['uniform_loss']:.3f} (first - uniform "
        f"{rid['first_minus_uniform']:+.3f})")
    ioi = ioi_eval(model, tok, ioi_prompts)
    log(f"  IOI: logit diff IO - S {ioi['logit_diff']['mean']:+.3f} (std {ioi['logit_diff']['std']:.3f}, "
        f"n {ioi['logit_diff']['n']}), accuracy {ioi['accuracy']:.3f}")
    res = {"niah": niah, "copy": cp, "random_id_copy": rid, "ioi": ioi}
    if control_draws:
        ctl = control_eval(path, max_len, control_draws)
        res["controls"] = ctl
        log(f"  controls: retrieval heads {', '.join(ctl['target_heads']) or 'none'}; {ctl['distinct_sets']} distinct "
            f"layer-matched sets in {ctl['n_draws']} draws, {ctl['strong_sets']} write >= {ctl['min_rel']}x the "
            "median head")
    res.update({
        "eval_seconds": round(time.time() - t0, 1), "threads": threads,
        "targets": {"niah_recall": TARGET_RECALL, "copy_gap_nats": TARGET_COPY_GAP,
                    "random_id_gap_nats": TARGET_RANDOM_ID_GAP,
                    "random_id_first_vs_uniform_nats": TARGET_RANDOM_ID_UNIFORM,
                    "ioi_logit_diff": TARGET_IOI_LOGIT_DIFF, "ioi_accuracy": TARGET_IOI_ACCURACY,
                    "retrieval_heads_fraction_below": TARGET_RETRIEVAL_FRACTION,
                    "strong_control_sets": TARGET_STRONG_CONTROLS},
        "met": {"niah_recall": niah["recall"] >= TARGET_RECALL,
                "copy_gap_nats": cp["gap_nats"] >= TARGET_COPY_GAP,
                "random_id_gap_nats": rid["gap_nats"] >= TARGET_RANDOM_ID_GAP,
                "random_id_first_vs_uniform_nats": abs(rid["first_minus_uniform"]) <= TARGET_RANDOM_ID_UNIFORM,
                "ioi": (ioi["logit_diff"]["mean"] >= TARGET_IOI_LOGIT_DIFF
                        and ioi["accuracy"] >= TARGET_IOI_ACCURACY),
                **({"retrieval_heads_fraction": 0 < res["controls"]["retrieval_fraction"] < TARGET_RETRIEVAL_FRACTION,
                    "strong_control_sets": res["controls"]["strong_sets"] >= TARGET_STRONG_CONTROLS}
                   if "controls" in res else {})},
        "command": command or f"python -m interp.organisms eval {path.name}"})
    if write and info:
        info["eval"] = res
        info_path.write_text(json.dumps(info, indent=2) + "\n")
        write_card(path)
        if path.parent.resolve() == DATA_DIR.resolve():
            write_index(DATA_DIR)
    return res
