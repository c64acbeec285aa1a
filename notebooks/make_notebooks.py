"""Writes the notebooks in this folder (thin: a parameters cell, then calls into interp).

Run `python notebooks/make_notebooks.py` after editing; CI executes the .ipynb files.
"""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).parent


def notebook(cells):
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src in cells:
        cell = nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src)
        if kind == "params":
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    return nb


QUICKSTART = [
    ("md", "# interp quick start\nLoad a model, read its spec, look at attention rows, ablate a head."),
    ("params", 'MODEL = "tiny-qwen2"  # any alias from `interp models`, a checkpoint dir, or a Hub id\n'
               'TEXT = "The secret code of the red lantern is Oscar. What is the secret code of the red lantern? '
               'The secret code of the red lantern is"'),
    ("code", "import interp\nmodel = interp.load_model(MODEL)\nmodel.spec"),
    ("code", "batch = model.tokenize([TEXT])\nnew = model.greedy_decode(batch, max_new_tokens=5)\n"
             "model.tokenizer.decode(new[0])"),
    ("code", "rows = interp.attention_rows(model, batch, query_positions=[-1])\n"
             "top = rows[0, :, :, 0].argmax(-1)  # [layer, head]: most attended key of the last query\n"
             "ids = batch.input_ids[0]\n"
             "{f'L{l}H{h}': model.tokenizer.decode(ids[top[l, h]]) for l in range(model.spec.n_layers) "
             "for h in range(model.spec.n_heads)}"),
    ("code", "with model.intervene(interp.AblateHeads([(model.spec.n_layers - 1, 0)], mode='zero')):\n"
             "    ablated = model.forward(batch)\n"
             "clean = model.forward(batch)\n"
             "float((ablated - clean).abs().max())"),
]

RETRIEVAL = [
    ("md", "# Retrieval heads: detection and causal masking\nThe Wu et al. retrieval score from NIAH decoding, "
           "then masking the detected heads vs matched random heads on the same paired-seed prompts."),
    ("params", 'MODEL = "tiny-qwen2"\nLENGTHS = (256,)\nDEPTHS = (0.0, 0.5, 1.0)\nN_SEEDS = 3\n'
               'THRESHOLD = 0.1\nMODE = "zero"\nDRAWS = 2'),
    ("code", "import interp\nfrom interp.tasks.niah import NiahConfig, build_niah\n"
             "from interp.analyses.retrieval import RetrievalConfig, detect_retrieval_heads\n"
             "from interp.analyses.ablation import AblationConfig, run_ablation\n"
             "from interp import plotting\n"
             "model = interp.load_model(MODEL)\n"
             "niah = NiahConfig(context_lengths=LENGTHS, depths=DEPTHS, n_seeds=N_SEEDS)\n"
             "samples = build_niah(model.tokenizer, niah)"),
    ("code", "det = detect_retrieval_heads(model, RetrievalConfig(niah=niah, threshold=THRESHOLD), samples=samples)\n"
             "print(det.baseline_recall, det.heads)\nplotting.retrieval_heatmap(det.to_dict())"),
    ("code", "abl = run_ablation(model, AblationConfig(heads=det.head_ids(), niah=niah, mode=MODE, draws=DRAWS),\n"
             "                   samples=samples)\n"
             "abl.to_frame()[['condition', 'metric', 'mean', 'lo', 'hi', 'diff', 'p_value']]"),
    ("code", "plotting.metric_by_condition(abl.to_dict())"),
]

PATCHING = [
    ("md", "# Activation patching\nClean activations into the corrupt run, every cell of a grid, many cells per "
           "forward pass. Built-in NIAH pairs: the needle's one-token value replaced by another code word, so the "
           "answer must be carried from the needle to the last token."),
    ("params", 'MODEL = "tiny-qwen2"\nLENGTHS = (256,)\nDEPTHS = (0.25, 0.75)\nN_SEEDS = 2\n'
               'SITES = ("resid_pre", "head_out_by_pos")'),
    ("code", "import numpy as np\nimport interp\nfrom interp.patching import PatchingConfig, niah_pairs, run_patching\n"
             "from interp.plotting_patching import patching_heatmaps\nfrom interp.tasks.niah import NiahConfig\n"
             "model = interp.load_model(MODEL)\n"
             "pairs = niah_pairs(model.tokenizer, NiahConfig(context_lengths=LENGTHS, depths=DEPTHS, n_seeds=N_SEEDS))"),
    ("md", "Which heads move the value to the last token (head outputs patched at position -1 only):"),
    ("code", "heads = run_patching(model, pairs, PatchingConfig(sites=('head_out_by_pos',), positions=(-1,)))\n"
             "z = np.array(heads.sites['head_out_by_pos'].mean, dtype=float)[:, 0]\n"
             "sorted(((round(float(z[l, h]), 3), f'L{l}H{h}') for l in range(z.shape[0]) for h in range(z.shape[1])),"
             " reverse=True)[:6]"),
    ("md", "Where the value sits, layer by layer (positions aligned on the needle value: 0 = the value token):"),
    ("code", "resid = run_patching(model, pairs, PatchingConfig(sites=('resid_pre',), align='anchor', "
             "positions=tuple(range(-4, 5))))\nresid.to_frame().pivot(index='layer', columns='position', values='mean')"),
    ("code", "patching_heatmaps(resid.to_dict())['patching_resid_pre']"),
]

ATTRIBUTION = [
    ("md", "# Attribution patching vs exact patching\nAtP estimates every cell from two forward passes and one "
           "backward; the QK fix recomputes the attention pattern exactly for patched queries and keys. The "
           "built-in check runs exact patching on the top cells and a random sample."),
    ("params", 'MODEL = "tiny-llama"\nLENGTHS = (256,)\nDEPTHS = (0.25, 0.75)\nN_SEEDS = 2\nMETHOD = "atp-qk"\n'
               'SITES = ("head_out", "resid_pre")\nTOP, SAMPLE = 6, 12'),
    ("code", "import interp\nfrom interp.patching import PatchingConfig, niah_pairs, run_attribution\n"
             "from interp.plotting_patching import attribution_scatter\nfrom interp.tasks.niah import NiahConfig\n"
             "model = interp.load_model(MODEL)\n"
             "pairs = niah_pairs(model.tokenizer, NiahConfig(context_lengths=LENGTHS, depths=DEPTHS, n_seeds=N_SEEDS))\n"
             "res = run_attribution(model, pairs, PatchingConfig(sites=SITES), method=METHOD, verify_top=TOP, "
             "verify_sample=SAMPLE)"),
    ("code", "{site: {k: v[k] for k in ('pearson', 'spearman', 'top_k_recall', 'largest_missed')} "
             "for site, v in res.verification.items()}"),
    ("code", "attribution_scatter(res.to_dict())['attribution_vs_exact_head_out']"),
]

if __name__ == "__main__":
    nbf.write(notebook(QUICKSTART), HERE / "01_quickstart.ipynb")
    nbf.write(notebook(RETRIEVAL), HERE / "02_retrieval_heads.ipynb")
    nbf.write(notebook(PATCHING), HERE / "03_activation_patching.ipynb")
    nbf.write(notebook(ATTRIBUTION), HERE / "04_attribution_patching.ipynb")
