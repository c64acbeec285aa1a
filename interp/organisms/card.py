"""Model cards (``data/organisms/NAME/README.md``) and the index README, rendered from organism.json."""

from __future__ import annotations

import json
from pathlib import Path

from .batches import ANSWER_WEIGHT

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
    """The issue-17 measurements (random-id copy, IOI, control strength), where the eval recorded them."""
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
    """The v2 recipe options (issue 17) a build used; none for a v1 build."""
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

Tiny causal LMs trained from scratch on a procedural corpus, for tests and
demonstrations of retrieval heads, RoPE frequency bands, induction and
copy-suppression heads. Each directory holds an HF checkpoint (`config.json`,
`model.safetensors`), the shared tokenizer, `organism.json` (config, training log,
checksum, metrics) and a model card (`README.md`). `tokenizer/` is the shared
byte-level BPE tokenizer (`python -m interp.organisms tokenizer` rebuilds it).

Everything here is generated; numbers are measured by the eval command, never typed in (the v1
table in the "v2 organisms" notes below copies the eval's printed output for the v1 checkpoints, which
are no longer shipped).

## Rebuild and measure

```
python -m interp.organisms tokenizer          # data/organisms/tokenizer
python -m interp.organisms build tiny-qwen2   # recipe v2, ~48 min on one CPU thread (--recipe v1: the first builds)
python -m interp.organisms eval tiny-qwen2    # NIAH, copy, random-id copy, IOI, control strength into the card
python -m interp.organisms eval tiny-qwen2 --no-write   # the same, printed only
```

NIAH prompts use `interp.corpus.make_niah_prompt` with held-out seeds
(integers in [1e9, 2e9), never used in training); the question ends with
`"... The secret code of the <key> is"` and the expected continuation is `" <code word>"`.
Targets: NIAH recall >= 0.95, second-copy loss >= 3 nats below first-copy loss; issue 17 adds random-id
copying (gap >= 3 nats, first copy within 1.5 nats of uniform), IOI (held-out logit diff >= 2 and
accuracy >= 0.9), retrieval heads < 25% of heads and at least 3 strong layer-matched control sets.
The table below says what was measured; a target that is not met is marked "NOT met" in
the model card.

## Recipe notes

- Induction heads must form within the budget (about 40 minutes of one CPU thread per
  model). With the plain corpus mix (and even with mostly word-salad repeats for the
  first 250 steps) they had not formed after several hundred steps; a warm-up mix of
  random vocabulary strings repeated 2-4 times at length 64 helps, and in the first
  builds the copy loss dropped (the phase change) only after ~1000 steps, at 256-512 tokens.
- The first builds (session 1) used 4-digit codes (`" ... is 4821."`). Trained for
  20-25 minutes, the RoPE models retrieved the *first* digit of a far needle at every
  depth (96-100%) but never learned to copy the following digits in order (full-code
  recall 0.05 below depth 1.0; at depth 1.0, 0.85-0.98). Codes with four different digits
  and denser retrieval supervision (`recall` documents) did not change that within
  900-step trial runs (session 2, answer-token accuracy flat, no induction yet). An
  attention read-out showed why: the heads that found the needle attended to its last
  digit (a summary position), and no head attended to the next digit while decoding.
  Since then a code is one word token, so an answer is one lookup; multi-token copying
  is measured separately by the copy evaluation (random tokens repeated twice). With this
  recipe tiny-qwen2 reached needle-answer accuracy 0.98 by step 525 and tiny-llama 0.95 by
  step 1200. Two tiny-qwen2 variants were trained and not adopted: seed 11 (9 of 32 heads
  detected as retrieval heads, vs 8 for the bundled build) and 4 query / 2 key-value heads
  (no retrieval by step 1400, stopped).
- tiny-gpt2 (learned positions) did not form induction heads within its budget in
  session 1 (two tries). In session 2, with the recipe above and a longer short-context
  phase, it formed them (copy gap 6.3 nats) and retrieved every needle at 256 tokens, but a
  build trained on to 512 tokens failed for needles placed past position ~256 (recall at
  512: 1.00 / 1.00 / 0.80 / 0.10 / 0.00 at depths 0 / 0.25 / 0.5 / 0.75 / 1.0): its
  position embeddings 256-511 had only 600 steps and the retrieval circuit did not carry
  over to them. The bundled tiny-gpt2 is trained to 256 tokens and evaluated there; the
  1024-token requirement applies to the RoPE models only.
- Session 3: sparse retrieval heads. Without a penalty, the organisms give retrieval to most
  heads of one layer (the session-2 tiny-qwen2: 7 of its 8 layer-2 heads, 8 of 32 in all), so a
  control "same number of random heads per layer, drawn from non-retrieval heads" cannot be
  formed and spills into the layers that feed the circuit. Giving a layer more heads made it
  worse: 16 query / 4 key-value heads of dim 32 detected 20 of 64 heads at step 1500 (15 of 16
  in layer 1), and with head dim 16 no induction had formed by step 1650 (both stopped). The
  adopted tiny-qwen2 adds a group lasso on every head's slice of the attention output
  projection (`head_lasso` 3e-3, same seed and data): 4 retrieval heads, exactly one key-value
  group (L2H4-L2H7), from step 800 on. The retrieval heads of a GQA model cluster by key-value
  group (they share keys and values); a lasso on output norms does not split a group, since
  heads with the same pattern can share a write at no extra cost. Side effect: heads outside
  layer 0 and the copy circuit write little into the residual stream (the other layer-2 heads
  about 0.2x the median head, against 2.3x for the retrieval heads; `interp ablate` reports
  this), so masking them is a weak control. Not adopted: lasso 1e-3 (6 layer-2 retrieval heads
  at step 800), lasso 3e-3 with 4 key-value heads (needle-answer accuracy 0.06 at step 950),
  and tiny-llama with lasso 3e-3 or 1e-3 (accuracy 0.02 at steps 1450 and 1050, where the
  unpenalised build had 0.38 at step 975): tiny-llama is the session-2 build.
  Two builds that stop the lasso early (`head_lasso_steps`) revive the silent heads and were
  measured with the README's grid (512/1024 tokens, 80 prompts) but not adopted this session:
  lasso for the first 800 steps: NIAH 1.00 at every eval cell, copy gap 5.85, retrieval heads
  L2H4-L2H7 plus L1H1 (0.11), masked 0.00, three distinct layer-matched random sets (L2H0-L2H3 with
  L1H0, L1H6 or L1H7; they write 0.8-1.4x the median head) keep 0.95-1.00; but the layer-1 key-value
  group L1H0-L1H3 scores 0.08-0.33, so 5 to 8 heads (up to 25%) are detected depending on the
  prompts (8 at 256 tokens). Lasso for the first 1500 steps: 4 heads at 512/1024 (5 at 256 and on a
  smaller 512 grid: L1H3 0.17-0.22), one layer-matched set (recall 1.00) writing 0.42x the median
  head. The first is the better control and the worse head count; it is the candidate to adopt
  once the detection threshold question is settled.
- Session 4 (issue 17): copying of arbitrary ids. The v1 organisms copy corpus tokens but not ids drawn
  uniformly from the vocabulary (table below). Recipe option `id_repeats`: documents of ids uniform over
  10..V-11 repeated 2-4 times (copies tagged like other repeats), added to both mixes with that weight.
  Two tiny-qwen2 builds (v1 config, lasso 3e-3, same seed), not adopted this session:
  `--set id_repeats=0.15` from step 0: no copy circuit formed (step 1000: answer accuracy 0.016, copy
  loss 5.0, head-norm sum 15 vs v1's 0.98, 0.81, 30; stopped). `--set id_repeats=0.15 --set
  id_repeats_from=800` (identical to v1 until step 800, when v1's circuit has formed; 47 min on one
  thread): random-id copy first 6.95 / second 0.26 / gap 6.68 nats against uniform 6.91 (both targets
  met; v1: 11.91 / 11.45 / 0.46), NIAH 1.00 at 256/512/1024 x 5 depths, corpus copy gap 6.52, retrieval
  heads L2H4-L2H7 as in v1; still one weak layer-matched control set and IOI at chance (0.51; not in
  the mix). model.safetensors sha256 457e68ad2aa6... It is the candidate to adopt for tiny-qwen2 (with
  the README results rerun), and the recipe to try on tiny-llama and tiny-gpt2.

- Session 5 (issue 17): the v2 organisms, built with `--recipe v2` and shipped. Finding first: the current
  code does not rebuild the v1 checkpoints bit for bit (a v1-config build matches v1's logged losses to
  step 100-125 and then differs by ~1e-4, diverging from there: those checkpoints predate the corpus package
  refactor); the v2 builds are what the current code and seeds produce (the determinism test covers every
  v2 option). Builds (one CPU thread each, two at a time on the 2-core machine):
  tiny-llama (random ids from step 1100, IOI on the six fixed train templates, weight 0.2): adopted (34.2 min).
  tiny-gpt2, first try (random ids and IOI 0.2 from step 700, 1024 tokens, half the rows at uniform random
  position offsets from step 1300, 400 steps at 1024): NIAH at 1024 tokens 0.80 / 0.80 / 0.90 / 0.95 / 0.20
  by depth (the last positions were nearly untrained: a uniform start leaves positions near 1023 rare),
  not adopted; second try (half of the shifted rows end at position 1023, 600 steps at 1024, IOI on the 168
  composed frames with weight 0.5): adopted (36.8 min). tiny-qwen2 (random ids and composed IOI 0.5 from
  step 800, lasso as v1): adopted (47.8 min; the session-4 candidate without IOI is not shipped).
  IOI, what happened: every build first learns "the second name of the first clause" (right on BABA, wrong
  on ABBA: tiny-qwen2 at step 1500 ABBA 0.08 / BABA 0.94 on held-out prompts). tiny-llama then learned the
  six train templates (train names x train templates: accuracy 0.90) but kept the heuristic on held-out
  templates; composed frames carried further in tiny-gpt2 (held-out templates with train names at step
  2600: ABBA 0.54, BABA 1.00) but held-out names, which no IOI training document uses as the answer, get
  little probability (tiny-llama at step 2100, probability on IO + S: 0.68 train names x train templates,
  0.39 held-out names x train templates, 0.04 held-out names x held-out templates) and the held-out
  accuracy stays at 0.65; tiny-qwen2 (lasso) stays at chance. Not tried for lack of time: IOI from step 0,
  IOI answers drawn from every corpus name, tiny-llama with composed frames, lasso schedules with v2.
- Session 6 (issue 17): IOI with word people. Recipe options added: `ioi_words` (this fraction of the IOI
  weight goes to documents whose two people are random one-token vocabulary words that are no corpus name,
  no name's start and no frame word, `interp.corpus.ioi.word_people`: only the repeat tells the answer
  apart, and no name of either split is ever an answer through them), `ioi_episode_tokens` (an IOI document
  holds one prompt per N tokens of its budget, so 512/1024-token rows keep as many IOI answers per token as
  64-token rows; without it they hold ~8x fewer) and `head_lasso_from`. Builds (one thread each, two at a
  time), held-out IOI logit diff / accuracy (ABBA / BABA accuracy), `python -m interp.organisms eval`:
  tiny-gpt2 `--set ioi_words=0.5`: +1.86 / 0.69 (0.38 / 1.00); `--set ioi_words=0.5 --set ioi=1.0`: +2.87 /
  0.71 (0.64 / 0.79; 0.82 at step 2200), NIAH 0.957 with 1024-token cells at depth 0.5 / 0.75 of 0.80 / 0.65;
  the same with `ioi_episode_tokens=128`: +2.44 / 0.67 (identical to the previous build to step 2200, where
  both had 0.82; 0.78 at step 2600). None adopted: the shipped tiny-gpt2 (0.65, NIAH 0.99) stays. tiny-qwen2
  with the lasso for the first 800 steps only (the session-3 schedule) and `ioi_words=0.5`: IOI weight 1.0
  (47.1 min): held-out IOI +3.69 / 0.85 (ABBA 0.77 / BABA 0.94; 0.88 at step 1500, 0.89 at step 2100, then
  down a little in the 1024-token phase), NIAH 1.00, its one layer-matched set writing 1.17x the median head;
  not adopted, superseded by IOI weight 2.0: adopted (54.6 min with a third process on the two cores; built
  as `--set` overrides that are now recipe v2's tiny-qwen2, same config): held-out IOI **+4.25 / 0.93**
  (ABBA 0.91 / BABA 0.96; 0.93 at steps 1500 and 2100 too), the issue's IOI target met; train names x train
  templates 0.91; NIAH 1.00 at every cell; random-id gap 6.74; retrieval heads L2H4-L2H7 as before; their one
  layer-matched set (L2H0-L2H3, the only one there is with four heads in an eight-head layer) writes 0.80x
  the median head (0.36x with the lasso to the end). The probability on IO + S is only 0.18: the filler
  prose's "X gave the Y to Z" sentences, where Z is any name, keep most of the mass on names that are not in
  the prompt; the logit difference does not see it.
- Session 7 (issue 17): fewer retrieval heads. Where the extra heads come from (retrieval scores at 512/1024
  tokens unless named, `interp detect retrieval`): tiny-llama has only L2H0/L2H1 at 512 tokens at step 2100
  (the end of its 512-token phase; a build of the same recipe with composed IOI frames), and L1H1 (0.78 at
  512) and L3H1 (0.38) join during the 1024-token phase; at 1024 tokens they already show at step 2100 (0.35,
  0.26). A lasso from step 2100 on (`--set head_lasso=1e-3 --set head_lasso_from=2100`, 39.8 min) does not
  remove them: L1H1 0.46, L2H0/L2H1 1.00, L3H1 0.36, L3H0 0.16, 5 of 16 again (not adopted; the lasso shrinks
  a head's write, not its attention pattern, which is what the detector reads). tiny-gpt2's four layer-1
  heads all copy from formation on (each ~1.0 at 128 and 256 tokens in a `--set ioi_words=0.5` build,
  identical to the shipped recipe until step 700); a lasso of 1e-3
  for the first 700 steps leaves all four (step 2200, stopped). A lasso of 3e-3 during the copy circuit's
  formation keeps L1H2 out of it: L1H0, L1H1, L1H3 at 1.00 and L1H2 below 0.03 at steps 1300 (128 tokens)
  and 2200 (256 tokens), with the lasso to step 1300 only, and at the end: adopted (`--set head_lasso=3e-3
  --set head_lasso_steps=1300`, now recipe v2's tiny-gpt2, 37.8 min): **3 of 16 retrieval heads** (the same
  3 at every threshold from 0.05 to 0.9), NIAH 1.00 at every cell (0.99 before), corpus copy gap 7.08,
  random-id gap 6.72, 7 distinct layer-matched control sets, all strong (1.41-2.01x the median head: each
  holds L1H2, the one layer-1 head left, and two heads of layers 0 and 2), held-out IOI +1.86 / 0.70 (ABBA
  0.54 / BABA 0.86; before +2.45 / 0.65, ABBA 0.34 / BABA 0.96). The same with the lasso to the end (37.9 min):
  also L1H0, L1H1, L1H3, NIAH 1.00, 7 strong sets, IOI +0.65 / 0.69; not adopted (lower IOI logit diff).
  tiny-llama with the lasso that worked on the other two (`--set head_lasso=3e-3 --set head_lasso_steps=800`):
  no copy circuit (needle-answer accuracy 0.02-0.03 at every log to step 1800, copy loss ~3.8 at step 1100
  and ~5.0 once the random ids joined; the unpenalised build had 0.39 at step 800 and 1.55 at step 1100);
  stopped at step ~1800.
- Session 8 (issue 17): tiny-llama with 2 retrieval heads. Two builds of the shipped recipe, one change
  each (one thread each, two at a time; identical to the shipped build to step 1100, step 25 loss 5.5109
  in all three): `--set ioi=0` (no IOI documents) and `--set head_lasso=3e-3 --set head_lasso_from=1100`
  (the lasso once the copy circuit has formed, to the end, IOI kept). Both keep the copy circuit to L2H0 +
  L2H1 through the 1024-token phase (the shipped recipe gains L1H1, L3H0, L3H1 there): at steps 1500 and
  2100 only L2H0/L2H1 score at 256/512/1024 tokens, and at the end, 512/1024 x 5 depths x 8 seeds, **2 of
  16** at every threshold from 0.01 to 0.9 (L2H0 0.96 / 0.93, L2H1 1.00 / 1.00). So the extra heads came
  with the IOI documents, which tiny-llama learned only on its six train templates. `python -m
  interp.organisms eval`, no IOI / lasso: NIAH 0.997 (one cell 0.95: 1024 tokens, depth 0) / 1.00, corpus
  copy gap 6.03 / 5.96, random-id gap 6.39 / 6.49 (first copy +0.04 / +0.06 above uniform), held-out IOI
  -0.01 / 0.51 and +0.13 / 0.52 (the lasso build also lost the train templates: 0.49, the shipped one had
  0.90), the one layer-matched control set (L2H2 + L2H3) writing **0.95x** / 0.50x the median head (the
  lasso shrinks every head it does not need: median write norm 3.2 against 22.7). Adopted: no IOI (39.5 min;
  `--set ioi=0`, now recipe v2's tiny-llama), for the live control and the simpler recipe; IOI stays on
  tiny-qwen2 (target met) and tiny-gpt2. With two retrieval heads in a four-head layer, tiny-llama has one
  layer-matched control set (three with the five heads before).

## v2 organisms (issue 17)

The shipped checkpoints (table at the end; every number in each card). Random-id copy: 16 sequences of 40
ids drawn uniformly from ids 10..1013, `<s> R R`, mean loss per copy without its first token; uniform =
ln(1004) = 6.91 nats. IOI: 192 prompts from the held-out names x held-out templates of
`interp.corpus.ioi`, logit(IO) - logit(S) at the last token (the cards add 96 train-split prompts as a
diagnostic). Controls: the retrieval heads detected at 512/1024 tokens (tiny-gpt2: 512/1016, its positions
end at 1024) x 5 depths x 8 seeds, threshold 0.1, and the 10 layer-matched random sets `interp ablate`
draws for them (seed 0), relative write norm on the first 8 NIAH prompts. Targets met: random-id copying
(all three: gaps 6.74 / 6.39 / 6.72 nats for tiny-qwen2 / tiny-llama / tiny-gpt2, first copy +0.03-0.07 above
uniform), NIAH (1.00 / 0.997 / 1.00), corpus copy gap >= 5 (6.59 / 6.03 / 7.08), retrieval heads < 25% on all
three (4 of 32, 2 of 16, 3 of 16), IOI on tiny-qwen2 (held-out logit diff +4.25, accuracy 0.93), at least
three strong control sets on tiny-gpt2 (7). NOT met: IOI on tiny-gpt2 (+1.86 / 0.70) and tiny-llama (not
trained on IOI since session 8: -0.01 / 0.51); three strong control sets on tiny-qwen2 and tiny-llama: their
retrieval heads fill half of one layer (L2H4-L2H7 of eight, L2H0-L2H1 of four), so the other half is the
only layer-matched set there is; it writes 0.80x / 0.95x the median head.
`tests/test_organisms_v2.py` asserts these levels.

The v1 checkpoints (sha256 984033e53478..., d5ab40c0fbf8..., 69bd6a795e31...; no longer shipped, same
measurements):

| model | random-id first / second / gap (nats) | first - uniform | without `<s>`: first / gap | IOI logit diff (mean, std, n) | IOI accuracy | retrieval heads | control sets: distinct / >= 0.5x median |
|---|---|---|---|---|---|---|---|
| tiny-gpt2 | 11.71 / 10.59 / 1.12 | +4.80 | 12.83 / 2.76 | +0.021, 0.458, 192 | 0.542 | L1H0-L1H3 (1.12x) | 10 / 9 (0.46-1.02x; layer 1 is full, so the draws come from layers 0 and 2) |
| tiny-llama | 11.92 / 10.76 / 1.17 | +5.01 | 16.85 / 4.94 | +0.002, 0.546, 192 | 0.490 | L2H0, L2H1 (0.96x) | 1 / 1 (L2H2+L2H3 1.02x) |
| tiny-qwen2 | 11.91 / 11.45 / 0.46 | +5.00 | 15.02 / 2.22 | +0.001, 0.485, 192 | 0.469 | L2H4-L2H7 (2.34x) | 1 / 0 (L2H0-L2H3 0.19x) |


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
