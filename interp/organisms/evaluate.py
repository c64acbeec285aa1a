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
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import corpus
from .tokenizer import load_tokenizer, token_counter

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_NEW_TOKENS = 6
COPY_LEN = 128
COPY_SEQS = 64
TARGET_RECALL = 0.95
TARGET_COPY_GAP = 3.0


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
def copy_eval(model, tok, seq_len: int = COPY_LEN, n_seqs: int = COPY_SEQS, batch: int = 16) -> dict:
    ids = torch.tensor(corpus_token_ids(tok))
    g = torch.Generator().manual_seed(corpus.heldout_seed(950_000))
    bos = tok.token_to_id("<s>")
    first, second = [], []
    for start in range(0, n_seqs, batch):
        b = min(batch, n_seqs - start)
        r = ids[torch.randint(len(ids), (b, seq_len), generator=g)]
        x = torch.cat([torch.full((b, 1), bos), r, r], dim=1)
        logits = model(input_ids=x).logits[:, :-1]
        nll = F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
        # target positions in x[:, 1:]: first copy 0..L-1, second copy L..2L-1
        first.append(nll[:, 1:seq_len].mean(1))
        second.append(nll[:, seq_len + 1:].mean(1))
    f, s = torch.cat(first), torch.cat(second)
    return {"first_copy_loss": f.mean().item(), "second_copy_loss": s.mean().item(),
            "gap_nats": (f - s).mean().item(), "seq_len": seq_len, "n_seqs": n_seqs,
            "n_candidate_ids": len(ids)}


def evaluate(path: str | Path, lengths: Sequence[int] | None = None,
             n_per_cell: int = 20, threads: int = 1, write: bool = True,
             command: str | None = None, log=print) -> dict:
    from .card import write_card, write_index
    from .train import DATA_DIR, INFO_FILE

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
    res = {"niah": niah, "copy": cp, "eval_seconds": round(time.time() - t0, 1),
           "targets": {"niah_recall": TARGET_RECALL, "copy_gap_nats": TARGET_COPY_GAP},
           "met": {"niah_recall": niah["recall"] >= TARGET_RECALL,
                   "copy_gap_nats": cp["gap_nats"] >= TARGET_COPY_GAP},
           "command": command or f"python -m interp.organisms eval {path.name}"}
    if write and info:
        info["eval"] = res
        info_path.write_text(json.dumps(info, indent=2) + "\n")
        write_card(path)
        if path.parent.resolve() == DATA_DIR.resolve():
            write_index(DATA_DIR)
    return res
