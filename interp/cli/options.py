"""Every option the commands share, their parsers (strings -> typed values, with clear errors), and the
one rule for the model a command runs on when --model is not given."""

from __future__ import annotations

from pathlib import Path

import typer

from interp.cli.parsers import (AUTO, finite, parse_batch_size, parse_escapes, parse_floats,  # noqa: F401
                                parse_ints, parse_max_memory, unit_interval)  # the commands import them from here
from interp.errors import InvalidInputError


def batch_option(default: int, what: str):
    """The --batch-size option of a command (`what`: prompts, sequences)."""
    return typer.Option(str(default), "--batch-size", parser=parse_batch_size, metavar="N|auto",
                        help=f"{what} per forward pass, or auto: the largest batch the memory planner fits in "
                             "the budget (--max-memory's entry for the device, else 90% of its free memory).")


def default_model() -> str:
    """The model a command runs on without --model: the bundled default organism, else the MiniLM encoder
    when its package is installed, else a tiny random model (no tokenizer: commands that need text say so)."""
    from interp.models.catalog import DEFAULT_MODEL, bundled_models, minilm_path

    if DEFAULT_MODEL in bundled_models():
        return DEFAULT_MODEL
    if minilm_path() is not None:
        return "minilm-l6"
    return "tiny-random-qwen2"


def model_label(name: str | None) -> str:
    """--model as given, or the default model (`default_model`) when it is not given: what the run loads
    and what its folder and results are named after. An empty or blank --model is an error."""
    if name is None:
        return default_model()
    if not name.strip():
        raise InvalidInputError("--model is empty; give an alias (see `interp models`), a directory or a Hub id")
    return name


def load_options(model: str | None, device=None, model_dtype=None, revision=None, device_map=None,
                 max_memory: str | None = None):
    """The LoadOptions of a command's --model (the default model when not given), --device, --model-dtype,
    --revision, --device-map and --max-memory (parsed): built once, passed on whole."""
    from interp.models.load_options import LoadOptions

    return LoadOptions(model_label(model), device, model_dtype, revision, device_map, parse_max_memory(max_memory))


def given(ctx, name: str) -> bool:
    """Whether the user passed option `name` (not its default)."""
    src = ctx.get_parameter_source(name) if ctx is not None else None
    return src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")


def niah_config(lengths: str, depths: str, seeds: int, haystack, needles, separator: str, max_new_tokens,
                paired: bool = False):
    """The NIAH grid of the options; `paired` (an experiment comparing conditions) needs >= 2 prompts.
    `needles`: "corpus" | "standard" (a built-in set; ./corpus for a file of that name) | a JSONL file | None
    (picked from the model by `niah_for_model`); `haystack`: a text file, a directory of .txt files, a fetched text's
    alias (`interp texts`) or None."""
    from interp.tasks.niah import NEEDLE_SOURCES, NiahConfig, haystack_files

    source = None
    if needles in NEEDLE_SOURCES:
        source, needles = needles, None
    if needles is not None and Path(needles).is_dir():
        raise InvalidInputError(f"--needles {needles} is a directory, not a file")
    if needles is not None and not Path(needles).is_file():
        raise InvalidInputError(f"--needles {needles}: no such file (or pass corpus or standard)")
    if haystack is not None:
        from interp.tasks.texts import TEXTS, resolve_haystack

        if not Path(haystack).exists() and haystack not in TEXTS:
            raise InvalidInputError(f"--haystack {haystack}: no such file or directory, nor a fetchable text "
                                    f"({', '.join(TEXTS)}; `interp texts` lists them)")
        haystack_files(resolve_haystack(haystack))  # a directory without .txt files is refused before the model loads
    cfg = NiahConfig(context_lengths=parse_ints(lengths, "--lengths"), depths=parse_floats(depths, "--depths"),
                     n_seeds=seeds, haystack_file=haystack, needles_file=needles,
                     separator=parse_escapes(separator), max_new_tokens=max_new_tokens, needle_source=source)
    n = len(cfg.context_lengths) * len(cfg.depths) * cfg.n_seeds
    if paired and n < 2:
        raise InvalidInputError(f"the NIAH grid has {n} prompt: paired comparisons need at least 2 (raise --n-seeds, "
                                "or add --lengths/--depths)")
    return cfg


MODEL = typer.Option(None, "--model", "-m", help="Alias, checkpoint dir, .gguf file or Hub id (default: bundled "
                     "default model).")
LENGTHS = typer.Option("512", "--lengths", help="NIAH context lengths in tokens, comma-separated.")
DEPTHS = typer.Option("0,0.25,0.5,0.75,1", "--depths", help="Needle depths (fraction of the haystack before it).")
SEEDS = typer.Option(4, "--n-seeds", min=1, help="Paired seeds per (length, depth).")
RANDOM_POOL = typer.Option("layer", "--random-pool", help="layer: random heads with the same count per layer "
                           "(matched); any: the same count from any layer.")


def check_random_pool(random_pool: str) -> None:
    """--random-pool must be layer or any (InvalidInputError)."""
    if random_pool not in ("layer", "any"):
        raise InvalidInputError(f"--random-pool {random_pool!r}: use layer (same count per layer) or any")

HAYSTACK = typer.Option(None, "--haystack", help="Plain-text haystack: a file, a directory of .txt files (sorted "
                        "by name, joined by blank lines), or a fetched text (`interp texts`, e.g. sherlock-holmes). "
                        "Default: interp's corpus generator (for models other than "
                        "the organisms an offline fallback; the run says so).")
NEEDLES = typer.Option(None, "--needles", help='corpus | standard | a JSONL file of {"needle", "question", "answer"} '
                       "per line. Default: corpus for the bundled organisms (what they were trained on), standard "
                       "(facts with multi-token answers, after Kamradt 2023) for every other model.")
SEPARATOR = typer.Option("\\n", "--separator", help="Inserted between haystack and question (with anything but the corpus "
                         "needles and haystack).")
MAX_NEW = typer.Option(None, "--max-new-tokens", min=1, help="Greedy tokens to decode (default: answer length + 2).")
BATCH = batch_option(8, "Prompts")
REVISION = typer.Option(None, "--revision", help="Hub revision (branch, tag or commit) of a Hub id or alias.")
DEVICE_MAP = typer.Option(None, "--device-map", help="Spread the model over devices with accelerate: auto | "
                          "balanced | balanced_low_0 | sequential (instead of --device; layers may go to CPU/disk).")
MAX_MEMORY = typer.Option(None, "--max-memory", help="Memory per device, e.g. 0=20GiB,1=20GiB,cpu=60GiB: with "
                          "--device-map accelerate's placement limits; the budget of --batch-size auto (a given "
                          "batch size is checked against it).")
DEVICE = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... (default: cuda if available).")
DTYPE = typer.Option(None, "--model-dtype", help="auto, float32, bfloat16, float16 (default: float32 on CPU, bf16 on "
                     "CUDA; auto: bf16 on CUDA and on CPUs with bf16 matrix instructions, else float32; run.json "
                     "records the choice). Attention rows, scores and logits stay float32 (docs/precision.md).")
OUT = typer.Option(None, "--out", "-o", help="Output directory (default: runs/<command>-<model>-<time>).")
JSON = typer.Option(False, "--json", help="Print the result JSON on stdout.")
OVERWRITE = typer.Option(False, "--overwrite", help="Replace the run already in --out (its files go; others stay).")
THRESHOLD = typer.Option(0.1, "--threshold", callback=finite, help="Retrieval-score threshold for a retrieval head.")


HEADS_HELP = ("retrieval (detected now, or from --from DIR) | induction (likewise, induction.json) | random | "
              "L3H1,L5H0 | L2H* (every head of layer 2) | FILE (ids, a retrieval.json or an induction.json).")
PROMPTS = typer.Option(None, "--prompts", help='Teacher-forced prompts instead of NIAH: JSONL, one '
                       '{"prompt": ..., "answer": " Paris", "wrong": " Rome"} per line (wrong for logit_diff only).')
METRIC = typer.Option(None, "--metric", help="With --prompts (default logit_diff): logit_diff (answer - wrong at the last token) "
                      "| logprob (sum of log p(answer tokens)) | loss (mean loss on the answer, or the whole prompt).")
CSV = typer.Option(False, "--csv", help="Also print the tidy table (CSV) on stdout; it is always written beside "
                   "the JSON.")
