"""Model cards (``data/organisms/NAME/README.md``) and the index README, rendered from organism.json."""

from __future__ import annotations

import json
from pathlib import Path

from interp.organisms.batches import ANSWER_WEIGHT

_ARCH = {
    "qwen2": "Qwen2ForCausalLM (grouped-query attention, RoPE)",
    "llama": "LlamaForCausalLM (multi-head attention, RoPE)",
    "gpt2": "GPT2LMHeadModel (learned absolute positions)",
}

_CORPUS = """\
Procedural English-like corpus from `interp/corpus/` (seeded `random.Random`;
templated sentences over ~250 words, names, places and number words):
(a) `needle` documents: 0-3 distractor needles plus one target needle
`" The secret code of the <adj> <noun> is <code word>."` (code word: one of 55 names and
towns, a single token) at a random depth in filler, then
`" What is the secret code of the <adj> <noun>? The secret code of the <adj> <noun> is"`
and the answer `" <code word>."`, sometimes followed by questions about the distractors;
`recall` documents: 2-8 needles scattered through filler, then questions about most of
them in random order (multi-query associative recall, after Arora et al. 2023)
(answer tokens weighted x{aw:g} in the loss);
(b) `induction`: a passage (prose or word salad) repeated verbatim, sometimes after a gap;
`salad`: a word-salad passage repeated 2-4 times; `tokens`: a string of uniformly random
space-prefixed vocabulary entries repeated 2-4 times (so the copy evaluation's random-token
repeats are close to, but not drawn from, this training distribution);
(c) `list`: lists drawn without replacement (`"Guests arriving: Alice, Bob, ..."`, sometimes
after an `"Invited: ..."` list) for copy suppression; (d) `filler`: plain prose.
Documents are packed into fixed-length sequences starting with `<s>`, separated by `</s>`.
The first `warm_steps` steps use the warm-up mix (mostly `tokens`/`salad` repeats) so that
induction heads form early. Training sequence `row` of step `step` comes from
`random.Random("train/<seed>/<step>/<row>")`; evaluation uses only integer seeds in
[1e9, 2e9) (`corpus.heldout_seed`), never used in training."""


def _metrics_lines(ev, trained_ioi: bool = False) -> list[str]:
    if not ev:
        return ["Not evaluated yet: run the eval command below."]
    n, c = ev["niah"], ev["copy"]
    lines = [
        (f"NIAH recall (greedy, {n['max_new_tokens']} new tokens, {n['n_per_cell']} held-out prompts "
        f"per cell, one needle): **{n['recall']:.3f}** overall "
        f"(target >= {ev['targets']['niah_recall']}: {'met' if ev['met']['niah_recall'] else 'NOT met'})."),
        "",
        "| length \\ depth | " + " | ".join(str(d) for d in n["depths"]) + " | mean |",
        "|---" * (len(n["depths"]) + 2) + "|",
    ]
    for length in n["lengths"]:
        row = n["cells"][str(length)]
        lines.append(f"| {length} | " + " | ".join(f"{row[str(d)]:.2f}" for d in n["depths"])
                     + f" | {n['by_length'][str(length)]:.3f} |")
    if "exact_prefix" in n:
        lines += ["", f"Exact prefix (the continuation starts with the answer): "
                      f"{n['exact_prefix']:.3f} (by length: "
                      + ", ".join(f"{k}: {v:.2f}" for k, v in n["exact_prefix_by_length"].items())
                      + ")."]
    lines += [
        "",
        (f"In-context copying ({c['n_seqs']} sequences of {c['seq_len']} random token ids, repeated "
        f"twice): first-copy loss {c['first_copy_loss']:.3f} nats, second-copy loss "
        f"{c['second_copy_loss']:.3f} nats, **gap {c['gap_nats']:.3f} nats** (target >= "
        f"{ev['targets']['copy_gap_nats']}: {'met' if ev['met']['copy_gap_nats'] else 'NOT met'})."),
    ]
    lines += _v2_lines(ev, trained_ioi)
    lines += [
        "",
        (f"Measured with: `{ev['command']}` ({ev['eval_seconds']:.0f} s on "
         f"{ev.get('threads', 1)} CPU thread{'s' if ev.get('threads', 1) != 1 else ''})."),
    ]
    return lines


def _met(ev, key) -> str:
    return "met" if ev.get("met", {}).get(key) else "NOT met"


def _without_bos(r) -> str:
    w = r.get("without_bos")
    if not w:
        return ""
    return (f" The same sequences without `<s>` (never seen in training): first {w['first_copy_loss']:.3f}, "
            f"second {w['second_copy_loss']:.3f}, gap {w['gap_nats']:.3f} nats.")


def _v2_lines(ev, trained_ioi: bool = False) -> list[str]:
    """The v2 measurements (random-id copy, IOI, control strength), where the eval recorded them."""
    lines = []
    r = ev.get("random_id_copy")
    if r:
        t = ev.get("targets", {})
        lines += ["", (f"Random-id copying ({r['n_seqs']} sequences of {r['seq_len']} ids drawn uniformly from ids "
                       f"{r['id_range'][0]}..{r['id_range'][1]}, repeated once): first-copy loss "
                       f"{r['first_copy_loss']:.3f} nats (uniform ln({r['id_range'][1] - r['id_range'][0] + 1}) = "
                       f"{r['uniform_loss']:.3f}: {r['first_minus_uniform']:+.3f}), second-copy loss "
                       f"{r['second_copy_loss']:.3f} nats, **gap {r['gap_nats']:.3f} nats** (target gap >= "
                       f"{t.get('random_id_gap_nats')}: {_met(ev, 'random_id_gap_nats')}; first copy within "
                       f"{t.get('random_id_first_vs_uniform_nats')} nats of uniform: "
                       f"{_met(ev, 'random_id_first_vs_uniform_nats')})."
                       + _without_bos(r))]
    q = ev.get("ioi")
    if q:
        d = q["logit_diff"]
        orders = "; ".join(f"{o} {v['logit_diff']['mean']:+.3f} / {v['accuracy']:.3f}"
                           for o, v in q["by_order"].items())
        t = ev.get("targets", {})
        target = (f"; target logit diff >= {t['ioi_logit_diff']:g} and accuracy >= {t['ioi_accuracy']:g}: "
                  f"{_met(ev, 'ioi')}" if "ioi_logit_diff" in t else "")
        seen = ("trained on the train names x train templates" if trained_ioi else "never trained on IOI")
        lines += ["", (f"IOI ({q['n_prompts']} prompts, {q['split']}; {seen}): logit difference IO - S at "
                       f"the last token {d['mean']:+.3f} (std {d['std']:.3f}, n {d['n']}), accuracy IO > S "
                       f"**{q['accuracy']:.3f}** (chance 0.5{target}); by order (logit diff / accuracy): {orders}; "
                       f"probability on IO + S {q['p_io_plus_s']:.3f}, on any corpus name {q['p_any_name']:.3f}."
                       + _ioi_train_split(q))]
    c = ev.get("controls")
    if c:
        if not c["target_heads"]:
            lines += ["", "Control strength: no retrieval heads detected, so no controls to draw."]
        else:
            sets = ", ".join(f"{'+'.join(x['heads'])} {x['head_write_rel']:.2f}x" for x in c["sets"])
            spill = {k: v for k, v in (c.get("shortfall_by_layer") or {}).items() if v}
            lines += ["", (f"Control strength: retrieval heads {', '.join(c['target_heads'])} (detected at "
                           f"{'/'.join(str(n) for n in c['detection']['context_lengths'])} tokens, "
                           f"{c['detection']['n_seeds']} seeds, threshold {c['detection']['threshold']}; they write "
                           f"{c['target_head_write_rel']:.2f}x the median head); {c['n_draws']} layer-matched "
                           f"random draws (seed {c['seed']}, as `interp ablate` draws them) give "
                           f"{c['distinct_sets']} distinct "
                           f"set(s), **{c['strong_sets']} writing >= {c['min_rel']}x the median head**: {sets}"
                           + (" (" + ", ".join(f"{v} head(s) short in layer {k}" for k, v in spill.items())
                              + ": drawn from the nearest layers)" if spill else "") + "."
                           + _control_targets(ev, c))]
    return lines


def _lasso_window(cfg: dict) -> str:
    start, stop = cfg.get("head_lasso_from", 0), cfg.get("head_lasso_steps", 0)
    if start and stop:
        return f"; applied from step {start} to step {stop} only"
    if start:
        return f"; applied from step {start} on only"
    return f"; applied for the first {stop} steps only" if stop else ""


def _recipe_v2_lines(cfg: dict) -> list[str]:
    """The v2 recipe options a build used; none for a v1 build."""
    out = []
    if cfg.get("id_repeats"):
        out.append(f"- random-id repeats (weight {cfg['id_repeats']:g} added to both mixes from step "
                   f"{cfg.get('id_repeats_from', 0)} on): ids drawn uniformly from 10..V-11, repeated 2-4 times, the "
                   "repeats tagged as copies")
    if cfg.get("ioi"):
        frames = ("one of the 168 composed train frames (`interp.corpus.ioi.composed_templates`)"
                  if cfg.get("ioi_kind") == "ioi_composed" else "one of the six fixed train templates")
        out.append(f"- IOI documents (weight {cfg['ioi']:g} added to both mixes from step {cfg.get('ioi_from', 0)} "
                   f"on): a prompt on {frames} with two TRAIN names and its indirect-object answer (weighted like "
                   "needle answers); the eval uses only the held-out names and held-out templates"
                   + (f"; in {cfg['ioi_words']:g} of them the two people are random vocabulary words, never a "
                      "corpus name (`interp.corpus.ioi.word_people`)" if cfg.get("ioi_words") else ""))
    if cfg.get("position_offsets"):
        out.append(f"- random position offsets from step {cfg.get('position_offsets_from', 0)} on: "
                   f"{cfg['position_offsets']:g} of the rows of a batch start at a random position in "
                   f"[0, {cfg['max_positions']} - length]"
                   + (f" ({cfg['position_offsets_right']:g} of those end at the last position)"
                      if cfg.get("position_offsets_right") else "")
                   + " (learned positions past the curriculum length get trained)")
    return out


def _ioi_train_split(q) -> str:
    t = q.get("train_split")
    if not t:
        return ""
    orders = "; ".join(f"{o} {v['logit_diff']['mean']:+.3f} / {v['accuracy']:.3f}" for o, v in t["by_order"].items())
    return (f" For comparison, {t['n_prompts']} prompts of the train names x the six fixed train templates: logit "
            f"difference {t['logit_diff']['mean']:+.3f}, accuracy {t['accuracy']:.3f} ({orders}).")


def _control_targets(ev, c) -> str:
    t = ev.get("targets", {})
    if "retrieval_fraction" not in c or "strong_control_sets" not in t:
        return ""
    return (f" Retrieval heads are {len(c['target_heads'])} of {c['n_heads_total']} heads "
            f"({100 * c['retrieval_fraction']:.1f}%; target < {100 * t['retrieval_heads_fraction_below']:g}%: "
            f"{_met(ev, 'retrieval_heads_fraction')}); at least {t['strong_control_sets']} strong distinct control "
            f"sets: {_met(ev, 'strong_control_sets')}.")


def render_card(info: dict) -> str:
    cfg, tr = info["config"], info["training"]
    heads = f"{cfg['heads']} query heads, {cfg['kv_heads']} key/value heads" if cfg["arch"] != "gpt2" \
        else f"{cfg['heads']} heads"
    rope = f", rope_theta={cfg['rope_theta']:g}" if cfg["arch"] != "gpt2" else ""
    curve = tr.get("loss_curve") or []
    lines = [
        f"# {info['name']}",
        "",
        (f"A tiny model organism for mechanistic-interpretability tests of the `interp` package: "
        f"{_ARCH[cfg['arch']]}, trained from scratch on CPU. Toy model; not for any real use."),
        "",
        "## Architecture",
        "",
        (f"- {cfg['layers']} layers, hidden {cfg['hidden']}, {heads}, head_dim {cfg['head_dim']}, "
        f"MLP {cfg['intermediate']}{rope}, max positions {cfg['max_positions']}, tied embeddings"),
        f"- {tr['n_params']:,} parameters, fp32 `model.safetensors`",
        ("- tokenizer: shared byte-level BPE (`data/organisms/tokenizer`, 1024 ids, every digit its "
        "own token, `<s>`=0 prepended by the tokenizer, `</s>`=1, `<pad>`=2)"),
        "",
        "## Training",
        "",
        _CORPUS.format(aw=cfg.get("answer_weight", ANSWER_WEIGHT)),
        "",
        "- corpus mix (document-type probabilities): "
        + ", ".join(f"{k} {v:g}" for k, v in sorted(cfg["mix"].items())),
        f"- warm-up mix for the first {cfg.get('warm_steps', 0)} steps: "
        + ", ".join(f"{k} {v:g}" for k, v in sorted(cfg.get("warm_mix", {}).items())),
        "- curriculum (sequence length x steps): "
        + ", ".join(f"{n}x{s}" for n, s in cfg["curriculum"])
        + f"; {cfg['tokens_per_step']} tokens per step",
        (f"- init std {cfg.get('init_std', 0.02):g}; AdamW lr {cfg['lr']:g} (warmup {cfg['warmup']}, cosine to {cfg['min_lr_frac']:g}x), "
        f"betas (0.9, 0.95), weight decay {cfg['weight_decay']:g}, grad clip {cfg['grad_clip']:g}"),
        *([f"- head group lasso {cfg['head_lasso']:g}: the loss adds this weight times the sum over all "
           "heads of the Frobenius norm of the head's slice of the attention output projection, so "
           "each job is done by few heads (unused heads shrink toward zero), as in trained LLMs "
           "where retrieval heads are a few percent of all heads"
           + _lasso_window(cfg)]
          if cfg.get("head_lasso") else []),
        *_recipe_v2_lines(cfg),
        (f"- seed {cfg['seed']}, {tr['steps']} steps, {tr['tokens_seen']:,} tokens, "
        f"{tr['train_seconds'] / 60:.1f} min on {info['environment']['threads']} CPU thread(s) "
        f"(torch {info['environment']['torch']}); deterministic for a given seed on CPU"),
        f"- final training LM loss (mean of last logging window): {tr['final_lm_loss']}",
        "",
        "| step | seq len | LM loss | needle answer token acc | loss on repeated spans |",
        "|---|---|---|---|---|",
    ]
    shown = curve[:: max(1, len(curve) // 12)]
    if curve and shown[-1] is not curve[-1]:
        shown.append(curve[-1])
    lines += [f"| {c['step']} | {c['len']} | {c['lm_loss']:.3f} | {c['answer_acc']:.3f} | "
              f"{c.get('copy_loss', float('nan')):.3f} |" for c in shown]
    lines += [
        "",
        "## Measured metrics",
        "",
        *_metrics_lines(info.get("eval"), trained_ioi=bool(cfg.get("ioi"))),
        "",
        "## Checksum",
        "",
        f"sha256 of model.safetensors: `{info['sha256']}`",
        "",
        "## Reproduce",
        "",
        "```",
        f"{tr['command']}",
        f"python -m interp.organisms eval {info['name']}",
        "```",
        "",
        ("Load with `transformers.AutoModelForCausalLM.from_pretrained(dir)` and "
        "`transformers.AutoTokenizer.from_pretrained(dir)`."),
        "",
    ]
    return "\n".join(lines)


def write_card(model_dir) -> Path:
    d = Path(model_dir)
    info = json.loads((d / "organism.json").read_text())
    p = d / "README.md"
    p.write_text(render_card(info))
    return p


_INDEX_HEAD = """\
# Bundled model organisms

Generated from each organism's `organism.json` (numbers measured by `python -m interp.organisms eval NAME`);
recipes, targets, the evidence for each recipe option and the commands to rebuild: [docs/organisms.md](../../docs/organisms.md).

## Models
"""


def write_index(data_dir) -> Path:
    d = Path(data_dir)
    lines = [_INDEX_HEAD, ("| model | arch | params | trained lengths | train min | NIAH recall "
             "(by length) | copy gap (nats) | random-id gap (nats) | IOI logit diff / accuracy | retrieval heads | "
             "strong control sets | sha256 (model.safetensors) |"),
             "|---" * 12 + "|"]
    for info_path in sorted(d.glob("*/organism.json")):
        info = json.loads(info_path.read_text())
        cfg, tr, ev = info["config"], info["training"], info.get("eval")
        if ev:
            by = ", ".join(f"{k}: {v:.2f}" for k, v in ev["niah"]["by_length"].items())
            niah = f"{ev['niah']['recall']:.3f} ({by})"
            gap = f"{ev['copy']['gap_nats']:.2f}"
        else:
            niah = gap = "not measured"
        rid = f"{ev['random_id_copy']['gap_nats']:.2f}" if ev and "random_id_copy" in ev else "not measured"
        ioi = (f"{ev['ioi']['logit_diff']['mean']:+.2f} / {ev['ioi']['accuracy']:.2f}" if ev and "ioi" in ev
               else "not measured")
        c = (ev or {}).get("controls")
        heads = (f"{len(c['target_heads'])} of {c['n_heads_total']}" if c and "n_heads_total" in c
                 else "not measured")
        strong = f"{c['strong_sets']} of {c['distinct_sets']}" if c else "not measured"
        lengths = "/".join(str(n) for n, _ in cfg["curriculum"])
        lines.append(f"| [{info['name']}]({info['name']}/README.md) | {cfg['arch']} | "
                     f"{tr['n_params']:,} | {lengths} | {tr['train_seconds'] / 60:.1f} | {niah} | "
                     f"{gap} | {rid} | {ioi} | {heads} | {strong} | `{info['sha256'][:16]}...` |")
    lines.append("")
    p = d / "README.md"
    p.write_text("\n".join(lines))
    return p
