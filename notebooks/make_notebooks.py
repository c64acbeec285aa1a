"""Writes the notebooks in this folder (thin: a parameters cell, then calls into the top-level `interp` API).

Run `python notebooks/make_notebooks.py` after editing; the test suite executes the .ipynb files
(tests/docs/test_notebooks.py) and checks the numbers each one prints on its last line as JSON.

Every notebook: a title, a parameters cell (tagged "parameters", sizes that run in well under a minute on
one CPU thread; 08, on the real pretrained models, in about 3 minutes), calls into `interp` (names from
`interp` itself, figures from `interp.figures`), at least one rendered figure, and a last cell that asserts
what the analysis should show and prints a one-line JSON summary of the numbers behind it.
"""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).parent


def notebook(cells):
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, (kind, src) in enumerate(cells):
        cell = nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src)
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating an unchanged notebook changes nothing
        if kind == "params":
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    return nb


def code(*lines):
    return ("code", "\n".join(lines))


def md(*lines):
    return ("md", "\n".join(lines))


def params(*lines):
    return ("params", "\n".join(lines))


QUICKSTART = [
    md("# interp quick start",
       "Load a model, read its spec, decode, look at attention rows, ablate a head."),
    params('MODEL = "tiny-qwen2"  # any alias from `interp models`, a checkpoint dir, or a Hub id',
           'TEXT = ("The secret code of the red lantern is Oscar. What is the secret code of the red lantern? "',
           '        "The secret code of the red lantern is")',
           'ANSWER = " Oscar"'),
    code("import json",
         "import interp",
         "from interp import figures",
         "model = interp.load_model(MODEL)",
         "model.spec"),
    code("batch = model.tokenize([TEXT])",
         "new = model.greedy_decode(batch, max_new_tokens=5)",
         "continuation = model.tokenizer.decode(new[0])",
         "continuation"),
    md("Attention of the last query (the position that must produce the answer) on the code word, per head:"),
    code("rows = interp.attention_rows(model, batch, query_positions=[-1])  # [batch, layer, head, n_query, key_len]",
         "ids = batch.input_ids[0].tolist()",
         "answer_pos = ids.index(model.tokenizer(ANSWER, add_special_tokens=False)['input_ids'][0])",
         "on_answer = rows[0, :, :, 0, answer_pos]  # [layer, head]",
         "L, H = on_answer.shape",
         "top = max(((float(on_answer[l, h]), f'L{l}H{h}') for l in range(L) for h in range(H)))",
         "figures.heads.score_heatmap({'model': model.name, 'scores': {'attention': on_answer.tolist()}},",
         "                             'attention', f'Attention of the last token on{ANSWER!r}', [top[1]]).show()",
         "top"),
    md("Ablating one head (zeroing its output) changes the logits:"),
    code("with model.intervene(interp.AblateHeads([(model.spec.n_layers - 1, 0)], mode='zero')):",
         "    ablated = model.forward(batch)",
         "clean = model.forward(batch)",
         "max_change = float((ablated - clean).abs().max())",
         "max_change"),
    code("# the model retrieves the code word, one head reads it from the last position, and ablation acts",
         "assert continuation.startswith(ANSWER), f'greedy continuation {continuation!r} should start with {ANSWER!r}'",
         "assert top[0] > 0.5, f'the head most attending to the code word puts only {top[0]:.2f} of its attention there'",
         "assert max_change > 0, 'zeroing a head must change the logits'",
         'print(json.dumps({"continuation": continuation, "top_head": top[1], "top_attention": round(top[0], 4),',
         '                  "max_logit_change": round(max_change, 4)}))'),
]

RETRIEVAL = [
    md("# Retrieval heads: detection and causal masking",
       "The Wu et al. retrieval score from NIAH decoding, then masking the detected heads vs matched random "
       "heads on the same paired-seed prompts."),
    params('MODEL = "tiny-qwen2"', "LENGTHS = (256,)", "DEPTHS = (0.0, 0.5, 1.0)", "N_SEEDS = 3",
           "THRESHOLD = 0.1", 'MODE = "zero"', "DRAWS = 2"),
    code("import json",
         "import interp",
         "from interp import figures",
         "model = interp.load_model(MODEL)",
         "niah = interp.NiahConfig(context_lengths=LENGTHS, depths=DEPTHS, n_seeds=N_SEEDS)",
         "samples = interp.build_niah(model.tokenizer, niah)"),
    code("det = interp.detect_retrieval_heads(model, interp.RetrievalConfig(niah=niah, threshold=THRESHOLD),",
         "                                    samples=samples)",
         "print(det.baseline_recall, det.heads)",
         "figures.experiments.retrieval_heatmap(det.to_dict())"),
    code("with interp.progress(len(samples) * (2 + DRAWS), 'ablation conditions') as advance:",
         "    abl = interp.run_ablation(model, interp.AblationConfig(heads=det.head_ids(), niah=niah, mode=MODE,",
         "                                                           draws=DRAWS), samples=samples, progress=advance)",
         "abl.to_frame()[['condition', 'metric', 'mean', 'lo', 'hi', 'diff', 'p_value']]"),
    code("figures.experiments.metric_by_condition(abl.to_dict())"),
    code("# masking the retrieval heads breaks retrieval; masking as many matched random heads does not",
         "recall = {c: abl.condition(c).estimates['recall']['mean'] for c in ('baseline', 'target')}",
         "recall['random'] = abl.random_pooled.estimates['recall']['mean']",
         "assert recall['baseline'] >= 0.9, f'the unmasked model should retrieve the needle: {recall}'",
         "assert recall['target'] < recall['random'] - 0.5, (f'masking the retrieval heads should drop recall far '",
         "                                                   f'below the random-head control: {recall}')",
         'print(json.dumps({"n_heads": len(det.heads), "heads": det.heads, "recall_baseline": recall["baseline"],',
         '                  "recall_target": recall["target"], "recall_random": recall["random"]}))'),
]

PATCHING = [
    md("# Activation patching",
       "Clean activations into the corrupt run, every cell of a grid, many cells per forward pass. Built-in NIAH "
       "pairs: the needle's one-token value replaced by another code word, so the answer must be carried from the "
       "needle to the last token. Effects are normalised: 0 = no effect, 1 = the clean logit difference restored."),
    params('MODEL = "tiny-qwen2"', "LENGTHS = (256,)", "DEPTHS = (0.25, 0.75)", "N_SEEDS = 2",
           "POSITIONS = tuple(range(-4, 5))  # around the needle value (0 = the value token)"),
    code("import json",
         "import numpy as np",
         "import interp",
         "from interp import figures",
         "model = interp.load_model(MODEL)",
         "pairs = interp.niah_pairs(model.tokenizer, interp.NiahConfig(context_lengths=LENGTHS, depths=DEPTHS,",
         "                                                             n_seeds=N_SEEDS))"),
    md("Which heads move the value to the last token (head outputs patched at position -1 only):"),
    code("heads = interp.run_patching(model, pairs, interp.PatchingConfig(sites=('head_out_by_pos',), positions=(-1,)))",
         "z = np.array(heads.sites['head_out_by_pos'].mean, dtype=float)[:, 0]  # [layer, head]",
         "ranked = sorted(((round(float(z[l, h]), 3), f'L{l}H{h}') for l in range(z.shape[0]) "
         "for h in range(z.shape[1])), reverse=True)",
         "ranked[:6]"),
    md("Where the value sits, layer by layer (positions aligned on the needle value: 0 = the value token):"),
    code("resid = interp.run_patching(model, pairs, interp.PatchingConfig(sites=('resid_pre',), align='anchor',",
         "                                                                 positions=POSITIONS))",
         "grid = resid.to_frame().pivot(index='layer', columns='position', values='mean').round(3)",
         "grid"),
    code("figures.patching.patching_heatmaps(resid.to_dict())['patching_resid_pre']"),
    code("# the needle value's residual stream carries the answer: patching it restores the clean logit difference",
         "# up to layer 2 and not at the last layer, where the value has already been read into the last token;",
         "# the positions around it carry nothing. The heads that move it there sit in layer 2.",
         "last = int(grid.index.max())",
         "needle = float(grid.loc[0, 0])",
         "needle_last = float(grid.loc[last, 0])",
         "others = float(grid.loc[:, [p for p in POSITIONS if p != 0]].abs().max().max())",
         "top_layers = sorted({name[:2] for _, name in ranked[:3]})",
         "assert needle > 0.9, f'patching the needle value at layer 0 should recover the logit difference: {needle:.3f}'",
         "assert needle_last < 0.1, f'at layer {last} the value should have left the needle position: {needle_last:.3f}'",
         "assert others < 0.05, f'patching the other positions should do nothing: max |effect| {others:.3f}'",
         "assert top_layers == ['L2'], f'the strongest heads at the last position should be in layer 2: {ranked[:3]}'",
         'print(json.dumps({"needle_layer0": round(needle, 4), "needle_last_layer": round(needle_last, 4),',
         '                  "other_positions_max": round(others, 4), "top_heads": [h for _, h in ranked[:3]],',
         '                  "top_head_effect": ranked[0][0], "n_pairs": resid.n_pairs}))'),
]

ATTRIBUTION = [
    md("# Attribution patching vs exact patching",
       "AtP estimates every cell from two forward passes and one backward; the QK fix recomputes the attention "
       "pattern exactly for patched queries and keys. The built-in check runs exact patching on the top cells "
       "and a random sample."),
    params('MODEL = "tiny-llama"', "LENGTHS = (256,)", "DEPTHS = (0.25, 0.75)", "N_SEEDS = 2",
           'METHOD = "atp-qk"', 'SITES = ("head_out", "resid_pre")', "TOP, SAMPLE = 6, 12"),
    code("import json",
         "import interp",
         "from interp import figures",
         "model = interp.load_model(MODEL)",
         "pairs = interp.niah_pairs(model.tokenizer, interp.NiahConfig(context_lengths=LENGTHS, depths=DEPTHS,",
         "                                                             n_seeds=N_SEEDS))",
         "res = interp.run_attribution(model, pairs, interp.PatchingConfig(sites=SITES), method=METHOD,",
         "                             verify_top=TOP, verify_sample=SAMPLE)"),
    code("check = {site: {k: v[k] for k in ('pearson', 'spearman', 'top_k_recall', 'largest_missed')}",
         "         for site, v in res.verification.items()}",
         "check"),
    code("figures.patching.attribution_scatter(res.to_dict())['attribution_vs_exact_head_out']"),
    code("# the cheap estimate agrees with exact patching on the cells that were checked",
         "for site, v in check.items():",
         "    assert v['pearson'] > 0.9, f'{site}: {METHOD} vs exact patching, Pearson {v[\"pearson\"]:.3f}'",
         "print(json.dumps({site: {k: (None if v[k] is None else round(float(v[k]), 4))",
         "                         for k in ('pearson', 'spearman', 'top_k_recall')} for site, v in check.items()}))"),
]

ROPE_ZERO = [
    md("# RoPE frequency zeroing and the RoPE profile of retrieval heads",
       "Detect the retrieval heads, then zero their lowest-frequency RoPE dims (post-RoPE q, so only these heads "
       "change) at growing doses. Controls at every dose, on the same paired prompts: the same number of random "
       "dims in the same heads, and the same band in matched other heads; plus next-token loss on plain text "
       "(task specificity). Then the profile: each head's share of |q.k| per rotary frequency pair."),
    params('MODEL = "tiny-qwen2"  # a RoPE model (GPT-2 has no rotary dims to zero)',
           "LENGTHS = (256,)", "DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)", "N_SEEDS = 4",
           "THRESHOLD = 0.1",
           'BAND = "lowest"  # lowest | highest | random',
           "DOSES = (0, 4, 8, 12, 16)  # dims zeroed per head (of head_dim 32 in tiny-qwen2)",
           "RANDOM_DRAWS, HEAD_DRAWS = 3, 2",
           "N_BOOT = 2000  # bootstrap resamples / sign-flip permutations (the CLI uses 5000)",
           'STATISTIC = "low_share"  # rope-profile head statistic: q_norm | k_norm | qk_norm | low_share'),
    code("import json",
         "import interp",
         "from interp import figures",
         "model = interp.load_model(MODEL)",
         "niah = interp.NiahConfig(context_lengths=LENGTHS, depths=DEPTHS, n_seeds=N_SEEDS)",
         "samples = interp.build_niah(model.tokenizer, niah)",
         "det = interp.detect_retrieval_heads(model, interp.RetrievalConfig(niah=niah, threshold=THRESHOLD),",
         "                                    samples=samples)",
         "print(f'recall {det.baseline_recall:.2f}; retrieval heads {det.heads}')"),
    code("rz = interp.run_rope_zero(model, interp.RopeZeroConfig(",
         "    heads=det.head_ids(), niah=niah, band=BAND, doses=DOSES, random_draws=RANDOM_DRAWS,",
         "    head_draws=HEAD_DRAWS, n_boot=N_BOOT, n_perm=N_BOOT, heads_source='retrieval (detected)'), samples=samples)",
         "table = rz.to_frame()",
         "table[~table.condition.str.match(r'(random dims|matched heads) \\d')][",
         "    ['dose', 'condition', 'metric', 'mean', 'lo', 'hi', 'diff', 'p_value']]"),
    code("figures.experiments.rope_dose_response(rz.to_dict())"),
    md("The profile: which frequencies each head's q.k logits use (pairs sorted from low to high frequency; "
       "● retrieval heads), and the head statistic compared between retrieval and other heads (Cohen's d, "
       "permutation test with labels permuted within layers)."),
    code("prof = interp.run_rope_profile(model, interp.RopeProfileConfig(",
         "    retrieval_heads=det.head_ids(), heads_source='retrieval (detected)', statistic=STATISTIC, n_perm=N_BOOT))",
         "figures.experiments.rope_usage_heatmap(prof.to_dict()).show()",
         "cmp_ = prof.comparison",
         "print(f\"{STATISTIC}: retrieval heads {cmp_['mean_retrieval']:.3f} vs other heads {cmp_['mean_other']:.3f}, \"",
         "      f\"Cohen's d {cmp_['cohens_d']:.2f}, layer-clustered p {cmp_['layer_clustered_permutation']['p_value']:.3f}\")"),
    code("# zeroing the band at the highest dose breaks retrieval in the retrieval heads, more than random dims",
         "# in the same heads and more than the same band in other heads; the language-model loss barely moves.",
         "# The retrieval heads put more of their q.k into the lowest frequencies than the other heads.",
         "top = rz.doses[-1]",
         "base = rz.baseline['metric']['mean']",
         "target, random_dims, matched = (top.target['metric']['mean'], top.random_pooled['metric']['mean'],",
         "                                top.matched_pooled['metric']['mean'])",
         "loss_change = top.task['vs_baseline']['diff']",
         "assert base >= 0.9, f'baseline recall {base:.2f}'",
         "assert target <= base - 0.5, f'zeroing {top.dose} {BAND}-frequency dims should lower recall: {base:.2f} -> {target:.2f}'",
         "assert target < random_dims and target < matched, (f'the band in the retrieval heads ({target:.2f}) should hurt '",
         "                                                   f'more than random dims ({random_dims:.2f}) and other heads '",
         "                                                   f'({matched:.2f})')",
         "assert abs(loss_change) < 0.1, f'next-token loss on plain text changed by {loss_change:+.3f} nats'",
         "assert cmp_['mean_retrieval'] > cmp_['mean_other'], f'{STATISTIC}: retrieval heads vs others {cmp_}'",
         'print(json.dumps({"heads": rz.heads, "dose": top.dose, "recall_baseline": base, "recall_target": target,',
         '                  "recall_random_dims": random_dims, "recall_matched_heads": matched,',
         '                  "recall_by_dose": [d.target["metric"]["mean"] for d in rz.doses],',
         '                  "task_loss_change": round(loss_change, 4), "statistic": STATISTIC,',
         '                  "stat_retrieval": round(cmp_["mean_retrieval"], 4), "stat_other": round(cmp_["mean_other"], 4),',
         '                  "cohens_d": round(cmp_["cohens_d"], 3)}))'),
]

INDUCTION = [
    md("# Induction heads and copy suppression",
       "Induction heads on repeated random tokens ([BOS] R R): attention scores from the real q and k, OV "
       "copying, first- vs second-copy loss, and a causal check (ablate the induction heads vs matched random "
       "heads, paired per sequence). Then copy-suppression heads on held-out corpus text: OV self-suppression, "
       "attention to earlier copies of the predicted token, direct logit effect, and ablation of candidates "
       "(direct vs total effect: self-repair)."),
    params('MODEL = "tiny-qwen2"', "LENGTH = 50  # tokens per copy", "N_SEQS = 16", "DRAWS = 3",
           "SWEEP = True  # also ablate every head alone", "N_TEXTS, SEQ_LEN = 16, 128  # copy suppression",
           "CANDIDATES = 3", "N_BOOT = 2000"),
    code("import json",
         "import interp",
         "from interp import figures",
         "model = interp.load_model(MODEL)",
         "ind = interp.detect_induction_heads(model, interp.InductionConfig(",
         "    repeated=interp.RepeatedConfig(lengths=(LENGTH,), n_seqs=N_SEQS), draws=DRAWS, sweep=SWEEP,",
         "    n_boot=N_BOOT, n_perm=N_BOOT))",
         "loss = ind.losses[0]",
         "print(f\"induction heads {ind.induction_heads}; previous-token heads {ind.prev_token_heads}\")",
         "print(f\"first copy {loss['early_loss']:.2f} nats, second copy {loss['late_loss']:.2f} nats \"",
         "      f\"(ICL score {loss['icl_score']:+.2f})\")",
         "scores = ind.to_frame().query(\"quantity in ('induction', 'prev_token', 'copying', 'ablation_delta_late_loss')\")",
         "scores.pivot_table(index='head_id', columns='quantity', values='value').sort_values('induction', "
         "ascending=False).head(8)"),
    code("figs = figures.heads.induction_figures(ind.to_dict())",
         "for name in ('induction_heatmap', 'induction_vs_copying', 'single_head_ablation_heatmap', 'ablation_late_loss'):",
         "    if name in figs:  # the single-head map needs SWEEP",
         "        figs[name].show()",
         "ind.causal_frame().query('metric == \"late_loss\"')[['condition', 'heads', 'mean', 'lo', 'hi', 'diff', "
         "'p_value']]"),
    md("Copy suppression: the candidates are the heads whose OV circuit most suppresses the token it reads. "
       "A copy-suppression head must meet every criterion (OV suppression, QK lift, negative direct effect, "
       "ablation raises p(copied token))."),
    code("cs = interp.detect_copy_suppression(model, interp.CopySuppressionConfig(",
         "    n_texts=N_TEXTS, seq_len=SEQ_LEN, n_candidates=CANDIDATES, n_boot=N_BOOT))",
         "print(cs.summary)",
         "csf = figures.heads.copy_suppression_figures(cs.to_dict())",
         "csf['ov_vs_dla'].show()",
         "{c['head']: c['criteria'] for c in cs.candidates}"),
    md("On the bundled organisms no head meets these criteria at these settings (measured on tiny-qwen2 and "
       "tiny-llama): their training mix has list documents meant to reward copy suppression, but no such head "
       "formed; the hand-built models in `tests/planted.py` are the positive case. The same measurements with "
       "the induction heads as the ablated heads show the opposite signature: ablating a copy head lowers the "
       "probability of the token it attends to (and the rest of the model compensates for part of its effect)."),
    code("cs_ind = interp.detect_copy_suppression(model, interp.CopySuppressionConfig(",
         "    n_texts=N_TEXTS, seq_len=SEQ_LEN, heads=tuple(ind.induction_heads), n_boot=N_BOOT))",
         "figures.heads.copy_suppression_figures(cs_ind.to_dict())['self_repair'].show()",
         "{c['head']: {k: round(c['ablation'][k]['mean'], 3) for k in ('delta_prob', 'direct', 'total', 'self_repair')}",
         " for c in cs_ind.candidates}"),
    code("# induction: the second copy is predicted far better than the first, and ablating the induction heads",
         "# (not matched random heads) removes that. Copy suppression: no head meets the criteria here, and",
         "# ablating each induction head lowers p(copied token): they copy, they do not suppress.",
         "c = ind.causal",
         "late = {x['name']: x['estimates']['late_loss']['mean'] for x in c['conditions']}",
         "late_random = c['random_pooled']['estimates']['late_loss']['mean']",
         "gap = loss['early_loss'] - loss['late_loss']",
         "assert ind.induction_heads, 'no induction head found'",
         "assert gap > 3.0, f'second-copy loss should be far below the first copy: gap {gap:.2f} nats'",
         "assert late['target'] - late['baseline'] > 3.0, f'ablating the induction heads should raise the second-copy loss: {late}'",
         "assert late_random - late['baseline'] < 0.5, f'matched random heads: second-copy loss {late_random:.2f}'",
         "dprob = {x['head']: x['ablation']['delta_prob'] for x in cs_ind.candidates}",
         "assert all(e['hi'] < 0 for e in dprob.values()), f'ablating an induction head should lower p(copied): {dprob}'",
         "max_ov = max(r['ov_suppression'] for r in cs.ranked)",
         'print(json.dumps({"induction_heads": ind.induction_heads, "early_loss": round(loss["early_loss"], 4),',
         '                  "late_loss": round(loss["late_loss"], 4), "late_loss_target": round(late["target"], 4),',
         '                  "late_loss_random": round(late_random, 4),',
         '                  "copy_suppression_heads": cs.copy_suppression_heads, "max_ov_suppression": max_ov,',
         '                  "induction_delta_prob": {h: round(e["mean"], 4) for h, e in dprob.items()}}))'),
]

PROBES = [
    md("# Activation store and positional vs semantic probes",
       "Cache the residual stream of held-out corpus text to a memory-mapped store on disk (atomic, checksummed "
       "shards), read it back, then fit held-out linear probes per layer: position (R²) and word category / "
       "token identity (accuracy), each against shuffled labels, with the position / context / rest variance "
       "decomposition. Two models: one with learned absolute position embeddings (GPT-2) and one with RoPE, "
       "whose residual stream gets no position vector at the input."),
    params('MODEL = "tiny-gpt2"  # learned absolute positions', 'ROPE_MODEL = "tiny-qwen2"  # rotary positions',
           "N_SEQUENCES = 128", "MAX_LENGTH = 64  # tokens per sequence (corpus texts are longer: all have this length)",
           'SITES = ("resid",)  # the residual stream at every depth',
           "STORE = None  # a folder for the stores; None: a new temporary folder"),
    code("import json, shutil, tempfile",
         "from pathlib import Path",
         "import numpy as np",
         "import interp",
         "root = Path(STORE or tempfile.mkdtemp(prefix='interp-store-'))",
         "data = interp.CorpusData(n_sequences=N_SEQUENCES)",
         "cfg = interp.CacheConfig(sites=SITES, max_length=MAX_LENGTH, shard_sequences=64)",
         "models = {name: interp.load_model(name) for name in (MODEL, ROPE_MODEL)}",
         "for name, m in models.items():",
         "    interp.cache_activations(m, data, root / name, cfg, overwrite=True)",
         "store = interp.open_store(root / MODEL)",
         "store"),
    md("The store is plain `.npy` shards: any reader can memory-map them without interp."),
    code("site = store.sites[0]",
         "x = store.get(site, 0, 8)  # torch tensor, tokens [0, 8)",
         "shard0 = np.load(root / MODEL / 'shards' / '00000' / f'{site}.npy', mmap_mode='r')",
         "assert np.array_equal(shard0[:8], x.numpy())",
         "print(store.sites, store.n_tokens, store.n_sequences, type(shard0).__name__, shard0.shape)",
         "print('positions', store.meta('positions')[:8], 'categories', store.manifest['categories'])"),
    md("Probes per site (held-out sequences score them), for both models:"),
    code("res = {name: interp.run_probes(interp.open_store(root / name), interp.ProbeConfig(), model=m)",
         "       for name, m in models.items()}",
         "frame = {name: r.to_frame() for name, r in res.items()}",
         "frame[MODEL][['site', 'position.r2_test', 'position.r2_shuffled', 'category.acc_test', "
         "'category.acc_majority', 'token.acc_test', 'decomposition.share_pos']]"),
    code("d = res[MODEL].to_dict()",
         "interp.probes_by_layer(d).show()",
         "interp.decomposition_by_layer(d).show()",
         "interp.probes_by_layer(res[ROPE_MODEL].to_dict()).show()",
         "if STORE is None:  # the stores were only for this notebook (set STORE to keep them)",
         "    shutil.rmtree(root)"),
    code("# learned position embeddings put position into the residual stream from the start (R^2 ~ 1 at the",
         "# embeddings); RoPE does not (R^2 ~ 0 there), position appears only after attention layers. Word",
         "# category is linearly readable at every depth in both, far above the majority class.",
         "def r2(name):",
         "    return [round(l['position']['r2_test'], 4) for l in res[name].layers]",
         "def cat_margin(name):",
         "    return min(l['category']['acc_test'] - l['category']['acc_majority'] for l in res[name].layers)",
         "r2_abs, r2_rope = r2(MODEL), r2(ROPE_MODEL)",
         "shuffled = max(abs(l['position']['r2_shuffled']) for r in res.values() for l in r.layers)",
         "assert r2_abs[0] > 0.9, f'{MODEL}: position R^2 at the embeddings {r2_abs[0]}'",
         "assert r2_rope[0] < 0.2, f'{ROPE_MODEL}: RoPE adds no position vector, yet R^2 at the embeddings is {r2_rope[0]}'",
         "assert max(r2_rope[1:]) > 0.3, f'{ROPE_MODEL}: position should become readable after attention: {r2_rope}'",
         "assert shuffled < 0.1, f'shuffled position labels should give R^2 ~ 0: {shuffled}'",
         "assert min(cat_margin(MODEL), cat_margin(ROPE_MODEL)) > 0.3, 'word category should beat the majority class'",
         'print(json.dumps({"sites": [l["site"] for l in res[MODEL].layers], "r2_position": r2_abs,',
         '                  "r2_position_rope": r2_rope, "r2_shuffled_max": round(shuffled, 4),',
         '                  "category_margin_min": round(min(cat_margin(MODEL), cat_margin(ROPE_MODEL)), 4),',
         '                  "n_tokens": store.n_tokens}))'),
]

THETA = [
    md("# Finding (ii) as a controlled experiment: retrieval heads vs rope_theta",
       "The seed paper compares LLaMA-2 (theta 1e4, 42 retrieval heads) with LLaMA-3.1 (theta 5e5, 47 heads): two "
       "models that differ in far more than theta. The organisms here differ ONLY in rope_theta and the training "
       "seed (tiny-llama's recipe, corpus, steps). Per build: NIAH recall, the retrieval heads, their "
       "lowest-band RoPE zeroing dose response; across builds: head count vs theta with a bootstrap over "
       "training seeds and NIAH seeds, and an exact permutation test of the slope. The builds are bundled in "
       "data/organisms/theta (`make results-theta` remeasures all ten with 8 NIAH seeds, at 512 tokens, where two "
       "builds per theta retrieve, and at 512/1024, where no theta-1e3 build does)."),
    params('BASE = "tiny-llama"',
           "THETAS = (1e3, 1e4, 5e5)",
           "SEEDS = (2, 3)  # training seeds",
           "EXTRA = ((1e4, 4),)  # (theta, seed) builds beyond the grid: seed 3 did not retrieve at 1e4",
           "LENGTHS = (512,)  # as the sweep's 512-token analysis, with fewer NIAH seeds (it uses 8)",
           "N_SEEDS = 2",
           "DOSES = (0, 8, 16)  # lowest-frequency dims zeroed per head (of 32)",
           "N_BOOT = 500"),
    code("import json",
         "import interp",
         "from interp import figures",
         "variants = interp.variant_grid(BASE, THETAS, SEEDS) + [interp.Variant(BASE, float(t), s) for t, s in EXTRA]",
         "paths = {v.name: interp.locate_build(v) for v in variants}",
         "niah = interp.NiahConfig(context_lengths=LENGTHS, n_seeds=N_SEEDS)",
         "missing = [n for n, p in paths.items() if p is None]",
         "assert not missing, f'not built: {missing}: run `interp organisms sweep` (about 40 min per build)'",
         "measures = []",
         "for v in variants:",
         "    m = interp.measure_build(paths[v.name], niah=niah, doses=DOSES)",
         "    m.name = v.name",
         "    measures.append(m)",
         "    print(f'{v.name}: recall {m.recall:.2f}, retrieval heads {m.heads}')"),
    code("res = interp.analyse_sweep(measures, BASE, n_boot=N_BOOT)",
         "print(res.table_md())",
         "res.to_frame()[['build', 'rope_theta', 'seed', 'recall', 'n_heads', 'heads', 'per_layer', 'qk_norm_d', "
         "'rope_zero_recall', 'rope_zero_random_dims']]"),
    code("figures.sweeps.theta_sweep(res)"),
    code("figures.sweeps.theta_dose_response(res)"),
    code("# the bundled tiny-llama (theta 1e4, seed 2) retrieves with its two layer-2 heads; every build that",
         "# retrieves does it with few heads (at most a quarter); zeroing the lowest band of those heads at the top",
         "# dose costs more recall than zeroing as many random dims. Which seeds retrieve, and the counts per theta,",
         "# are the experiment's result, printed, not asserted.",
         "by_name = {b.name: b for b in res.builds}",
         "bundled = by_name[f'{BASE}-theta10000-seed2']",
         "assert bundled.retrieves and set(bundled.heads) == {'L2H0', 'L2H1'}, (bundled.recall, bundled.heads)",
         "used = [b for b in res.builds if b.retrieves]",
         "assert len({b.rope_theta for b in used}) >= 2, res.excluded",
         "assert all(1 <= b.n_heads <= b.n_heads_total // 4 for b in used), [(b.name, b.heads) for b in used]",
         "top = {b.name: b.rope_zero[-1] for b in used}",
         "assert all(d['target'] < d['random_dims'] for d in top.values()), top",
         "t = res.trend",
         'print(json.dumps({"counts": {f"{s[\'setting\']:g}": s["counts"] for s in t["settings"]},',
         '                  "excluded": res.excluded, "slope": round(t["slope"], 3), "p_value": round(t["p_value"], 4),',
         '                  "recall": {b.name: round(b.recall, 3) for b in res.builds},',
         '                  "heads": {b.name: b.heads for b in res.builds},',
         '                  "rope_zero_target": {n: d["target"] for n, d in top.items()},',
         '                  "rope_zero_random": {n: round(d["random_dims"], 4) for n, d in top.items()}}))'),
]

REAL = [
    md("# The seed analyses on two real pretrained models",
       "SmolLM2-135M (`smollm2-135m`) and Gemma-3-270M (`gemma3-270m`), dequantised from their GGUF files into "
       "interp's cache (`make models`: `interp models fetch smollm2-135m gemma3-270m` and `interp texts fetch "
       "sherlock-holmes`), float32 on the CPU. Induction heads on both (detection, then masking them vs "
       "layer-matched random heads), retrieval heads on SmolLM2 (NIAH with *The Adventures of Sherlock Holmes* as "
       "the haystack and interp's standard needles) and their overlap with the induction heads.",
       "",
       "The grids here are reduced so that the notebook runs in about 3 minutes on one CPU thread (8 sequences of "
       "24 tokens, 2 random head sets, 8 NIAH prompts at 1024 tokens). The full grids (32 sequences of 50 tokens, "
       "10 random sets; NIAH at 1024-4096 tokens, 5 depths x 4 needles; copy suppression; retrieval-head masking) "
       "are `make results-real`, and what they found is [docs/results-real.md](../docs/results-real.md)."),
    params('MODELS = ("smollm2-135m", "gemma3-270m")',
           "LENGTH, N_SEQS = 24, 8  # repeated random sequences: tokens per copy, sequences",
           "DRAWS = 2  # layer-matched random head sets",
           "COPY_TOKENS = 32  # token sample of the OV copying score (Gemma-3's 262k-token unembedding is the cost)",
           "N_BOOT = 300",
           'RETRIEVAL_MODEL = "smollm2-135m"',
           'HAYSTACK = "sherlock-holmes"',
           "LENGTHS = (1024,)", "DEPTHS = (0.25, 0.75)", "N_SEEDS = 4  # one standard needle per seed",
           "THRESHOLD = 0.1"),
    code("import json, math",
         "import pandas as pd",
         "import interp",
         "from interp import figures",
         "models = {name: interp.load_model(name) for name in MODELS}",
         "def geometry(m):",
         "    s = m.spec",
         "    types = s.layer_types or ('full_attention',) * s.n_layers",
         "    return {'model': m.name, 'layers': s.n_layers, 'heads': s.n_heads, 'kv_heads': s.n_kv_heads,",
         "            'head_dim': s.head_dim, 'd_model': s.d_model, 'vocab': s.d_vocab,",
         "            'rope_theta': {t: s.theta_of(types.index(t)) for t in sorted(set(types))},",
         "            'sliding_window': s.sliding_window,",
         "            'full_attention_layers': ([l for l, t in enumerate(types) if t == 'full_attention']",
         "                                      if len(set(types)) > 1 else 'all')}",
         "geo = {name: geometry(m) for name, m in models.items()}",
         "pd.DataFrame(geo.values()).set_index('model')"),
    md("Gemma-3 alternates two layer types: five sliding-window layers (512-token window, rope_theta 1e4), then one "
       "full-attention layer (rope_theta 1e6); SmolLM2 has one type (full attention, theta 1e5) and 3 key-value "
       "heads shared by 9 query heads."),
    code("print(models['gemma3-270m'].spec.layer_types)"),
    md("## Induction heads",
       "[BOS] R R with R random tokens: the induction score (attention from the second copy to the token after "
       "the same token in the first copy), OV copying, first- vs second-copy loss; then the induction heads "
       "zero-ablated vs layer-matched random sets of as many heads, paired per sequence."),
    code("# the induction heads of the full runs (docs/results-real.md: 32 sequences x 50 tokens, 10 random sets)",
         'FULL_RUN = {"smollm2-135m": {"L18H6", "L17H3", "L17H4", "L18H7", "L23H2", "L20H6"},',
         '            "gemma3-270m": {"L5H1", "L11H2", "L5H2"}}',
         "ind = {}",
         "for name, m in models.items():",
         "    ind[name] = interp.detect_induction_heads(m, interp.InductionConfig(",
         "        repeated=interp.RepeatedConfig(lengths=(LENGTH,), n_seqs=N_SEQS), draws=DRAWS, copy_tokens=COPY_TOKENS,",
         "        n_boot=N_BOOT, n_perm=N_BOOT))",
         "    loss = ind[name].losses[0]",
         "    print(f\"{name}: induction heads {ind[name].induction_heads} (full run: {sorted(FULL_RUN[name])}); \"",
         "          f\"previous-token heads {ind[name].prev_token_heads}\")",
         "    print(f\"  first copy {loss['early_loss']:.2f} nats, second copy {loss['late_loss']:.2f} \"",
         "          f\"(ICL score {loss['icl_score']:+.2f})\")",
         "pd.DataFrame([{'model': n, 'head': r['head'], 'induction': round(r['induction'], 3),",
         "               'copying': round(r['copying'], 3), 'prev_token': round(r['prev_token'], 3),",
         "               'induction_head': r['head'] in ind[n].induction_heads}",
         "              for n in MODELS for r in ind[n].ranked[:8]])"),
    md("The causal check: the second-copy loss with the induction heads masked vs the random sets (which heads "
       "each set masked: the `heads` column)."),
    code("pd.concat([ind[n].causal_frame().query('metric == \"late_loss\"').assign(model=n)[",
         "    ['model', 'condition', 'heads', 'mean', 'lo', 'hi', 'diff', 'p_value']] for n in MODELS])"),
    code("for n in MODELS:",
         "    figures.heads.induction_figures(ind[n].to_dict())['ablation_late_loss'].show()"),
    md("## Retrieval heads (SmolLM2) and the induction heads",
       "NIAH prompts of 1024 tokens from the book with one standard needle each (a natural-language fact); the "
       "retrieval score of a head: how often, while the model decodes the answer, its top attention is on the "
       "needle token it copies (Wu et al. 2024), averaged over the recalled prompts."),
    code("m = models[RETRIEVAL_MODEL]",
         "niah = interp.NiahConfig(context_lengths=LENGTHS, depths=DEPTHS, n_seeds=N_SEEDS, haystack_file=HAYSTACK,",
         "                         needle_source='standard')",
         "samples = interp.build_niah(m.tokenizer, niah)",
         "det = interp.detect_retrieval_heads(m, interp.RetrievalConfig(niah=niah, threshold=THRESHOLD), samples=samples)",
         "print(f'recall {det.baseline_recall:.2f} ({det.n_used} of {det.n_samples} prompts); '",
         "      f'{len(det.heads)} retrieval heads (score > {THRESHOLD}): {det.heads}')",
         "[(o['id'], o['recall'], o['continuation']) for o in det.outcomes]"),
    code("# overlap: the induction heads vs the retrieval heads; chance: k random heads all among the R retrieval",
         "# heads of N (hypergeometric)",
         "induction = ind[RETRIEVAL_MODEL].induction_heads",
         "k, R, N = len(induction), len(det.heads), m.spec.n_total_heads",
         "top_retrieval = det.heads[:k]",
         "common = sorted(set(induction) & set(det.heads))",
         "p_chance = math.comb(R, k) / math.comb(N, k)  # P(k random heads all among the R retrieval heads)",
         "print(f'induction heads among the {R} retrieval heads: {len(common)} of {k}; the {k} best retrieval heads '",
         "      f'{top_retrieval}: {len(set(top_retrieval) & set(induction))} are induction heads; '",
         "      f'{k} random heads of {N} all among the {R}: p = {p_chance:.1e}')",
         "figures.heads.score_heatmap({'model': m.name, 'scores': {'retrieval': det.scores}}, 'retrieval',",
         "                            'Retrieval score (● induction heads)', induction, zrange=(0, 1))"),
    code("# both models copy a repeated sequence through a few induction heads: masking them raises the second-copy",
         "# loss by several nats, masking layer-matched random heads barely moves it; the heads are (nearly) the",
         "# full runs'. SmolLM2's retrieval heads include every induction head, the best of them first.",
         "summary = {}",
         "for n in MODELS:",
         "    r, c = ind[n], ind[n].causal",
         "    late = {x['name']: x['estimates']['late_loss']['mean'] for x in c['conditions']}",
         "    rand = c['random_pooled']['estimates']['late_loss']['mean']",
         "    tvr = next(t for t in c['target_vs_random'] if t['metric'] == 'late_loss')",
         "    found, full = set(r.induction_heads), FULL_RUN[n]",
         "    gap = r.losses[0]['early_loss'] - r.losses[0]['late_loss']",
         "    assert gap > 3.0, f'{n}: the second copy should be far easier than the first: gap {gap:.2f} nats'",
         "    assert len(found & full) >= len(full) - 1 and len(found) <= len(full) + 2, (n, sorted(found), sorted(full))",
         "    up, up_random = late['target'] - late['baseline'], rand - late['baseline']",
         "    assert up > 3.0 and up > 4 * max(up_random, 0.1), f'{n}: masked +{up:.2f} nats vs random +{up_random:.2f}'",
         "    assert tvr['diff_lo'] > 0, tvr",
         "    summary[n] = {'layers': geo[n]['layers'], 'heads': geo[n]['heads'], 'kv_heads': geo[n]['kv_heads'],",
         "                  'full_attention_layers': geo[n]['full_attention_layers'], 'induction_heads': r.induction_heads,",
         "                  'early_loss': round(r.losses[0]['early_loss'], 4), 'late_loss': round(late['baseline'], 4),",
         "                  'late_loss_target': round(late['target'], 4), 'late_loss_random': round(rand, 4),",
         "                  'target_vs_random_lo': round(tvr['diff_lo'], 4)}",
         "assert geo['gemma3-270m']['full_attention_layers'] == [5, 11, 17]",
         "assert all(int(h[1:h.index('H')]) in (5, 11, 17) for h in ind['gemma3-270m'].induction_heads)",
         "assert det.baseline_recall >= 0.5, f'recall {det.baseline_recall:.2f}'",
         "assert set(induction) <= set(det.heads), f'induction heads {induction} vs retrieval heads {det.heads}'",
         "assert len(set(top_retrieval) & set(induction)) >= k - 1 and p_chance < 1e-4, (top_retrieval, p_chance)",
         "summary['retrieval'] = {'model': RETRIEVAL_MODEL, 'recall': det.baseline_recall, 'n_heads': R,",
         "                        'top_heads': det.heads[:8],",
         "                        'top_scores': [round(det.scores[x.layer][x.head], 4)",
         "                                       for x in map(interp.HeadId.parse, det.heads[:8])],",
         "                        'induction_in_top_k': len(set(top_retrieval) & set(induction)),",
         "                        'p_chance': float(f'{p_chance:.3g}')}",
         "print(json.dumps(summary))"),
]

NOTEBOOKS = {
    "01_quickstart": QUICKSTART,
    "02_retrieval_heads": RETRIEVAL,
    "03_activation_patching": PATCHING,
    "04_attribution_patching": ATTRIBUTION,
    "05_rope_zeroing": ROPE_ZERO,
    "06_induction_copy_suppression": INDUCTION,
    "07_probes_activation_store": PROBES,
    "08_real_models": REAL,
    "09_theta_sweep": THETA,
}

if __name__ == "__main__":
    for name, cells in NOTEBOOKS.items():
        nbf.write(notebook(cells), HERE / f"{name}.ipynb")
