"""Training the bundled model organisms (deterministic on CPU for a given seed).

``python -m interp.organisms build tiny-qwen2`` trains one organism into
``data/organisms/tiny-qwen2/``.  Tests call :func:`train` with a tiny config and
a few steps.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from interp.organisms.batches import ANSWER_WEIGHT, DEFAULT_MIX, WARM_MIX, Packer
from interp.organisms.tokenizer import BOS, EOS, PAD, build_tokenizer, load_tokenizer, save_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data" / "organisms"
TOKENIZER_DIR = DATA_DIR / "tokenizer"
INFO_FILE = "organism.json"


@dataclass
class OrganismConfig:
    name: str
    arch: str  # "qwen2" | "llama" | "gpt2"
    hidden: int = 128
    layers: int = 4
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 32
    intermediate: int = 512
    init_std: float = 0.05
    rope_theta: float = 1e4
    max_positions: int = 2048
    # curriculum: (sequence length, optimisation steps) in order
    curriculum: list[tuple[int, int]] = field(default_factory=lambda: [(128, 10)])
    tokens_per_step: int = 4096
    lr: float = 4e-3
    min_lr_frac: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    warm_steps: int = 300
    warm_mix: dict[str, float] = field(default_factory=lambda: dict(WARM_MIX))
    answer_weight: float = ANSWER_WEIGHT
    # group-lasso weight on each attention head's output projection (sum over heads of the
    # Frobenius norm of its slice): pushes the model to do each job with few heads, as trained LLMs do
    head_lasso: float = 0.0
    head_lasso_steps: int = 0  # apply the lasso only before step N (0: to the end)
    head_lasso_from: int = 0  # ... and from this step on (after a circuit formed: prune the heads it no longer needs)
    # weight of random-id repeat documents (ids uniform over the vocabulary, repeated 2-4 times) added to both
    # mixes (the mixes' weights sum to 1): 0 keeps the v1 recipes exactly
    id_repeats: float = 0.0
    id_repeats_from: int = 0  # ... from this step on (after the copy circuit formed on familiar tokens)
    # weight of IOI documents (interp.corpus.ioi_doc: one prompt of the TRAIN names and templates and its
    # indirect-object answer, tagged "answer") added to both mixes from step ioi_from on: 0 keeps v1
    ioi: float = 0.0
    ioi_from: int = 0
    ioi_kind: str = "ioi"  # "ioi": the six fixed train templates; "ioi_composed": 168 composed train frames
    # this fraction of the IOI weight goes to documents of the same frames whose two people are random
    # vocabulary words, never names (interp.corpus.ioi.ioi_words_doc): 0 keeps the builds above
    ioi_words: float = 0.0
    # 0: an IOI document is one prompt; N: one prompt per N tokens of the document's budget (at least one), so
    # the long curriculum phases, which pack only a document or two per row, keep training IOI
    ioi_episode_tokens: int = 0
    # learned absolute positions only (gpt2): from step position_offsets_from on, this fraction of the rows
    # of a batch starts at a random position in [0, max_positions - length] instead of 0, so position
    # embeddings past the current curriculum length are trained by the short, cheap phases
    position_offsets: float = 0.0
    position_offsets_from: int = 0
    # ... of the shifted rows, this fraction ends at the last position (start max_positions - length) rather
    # than at a uniform start, which alone leaves the last positions nearly untrained
    position_offsets_right: float = 0.0

    @property
    def total_steps(self) -> int:
        return sum(s for _, s in self.curriculum)

    @property
    def max_trained_length(self) -> int:
        return max(length for length, _ in self.curriculum)


IOI_KINDS = ("ioi", "ioi_composed")
CURRICULUM = [(64, 300), (128, 500), (256, 700), (512, 600), (1024, 600)]

ORGANISMS: dict[str, OrganismConfig] = {
    "tiny-qwen2": OrganismConfig(
        name="tiny-qwen2", arch="qwen2", heads=8, kv_heads=2, rope_theta=1e6,
        curriculum=list(CURRICULUM), seed=1, head_lasso=3e-3,
    ),
    "tiny-llama": OrganismConfig(
        name="tiny-llama", arch="llama", heads=4, kv_heads=4, rope_theta=1e4,
        curriculum=list(CURRICULUM), seed=2,
    ),
    "tiny-gpt2": OrganismConfig(
        name="tiny-gpt2", arch="gpt2", heads=4, kv_heads=4, max_positions=1024,
        curriculum=[(64, 500), (128, 800), (256, 1200)], warm_steps=500, lr=3e-3,
        seed=3,
    ),
}
# v2 recipes: identical to v1 until the copy circuit has formed on corpus tokens (v1's answer
# accuracy jumps at step ~800 / ~1000 / ~400), then random-id repeats and IOI documents join the mix;
# tiny-gpt2 is trained on to 1024 tokens, with half of the rows at random position offsets from its
# 256-token phase on so that its learned position embeddings 256..1023 are trained too. tiny-gpt2 also has
# the head lasso through its 128-token phase (steps 0-1299): without it all four layer-1 heads copy (4 of
# 16 retrieval heads); with it one of them (L1H2) stays out of the copy circuit and keeps out after the
# lasso stops (3 of 16), and the silenced heads revive into strong controls.
# tiny-llama has no IOI documents: with them (weight 0.2 from step 1100, the first v2 build) three more heads
# (L1H1, L3H0, L3H1) join its copy circuit in the 1024-token phase, 5 of 16 retrieval heads, and it learned
# IOI on its six train templates only (held-out accuracy 0.45); without them the circuit stays L2H0 + L2H1
# (2 of 16) as in v1. tiny-qwen2 and tiny-gpt2 carry the IOI task (docs/organisms.md, "IOI").
ORGANISMS_V2: dict[str, OrganismConfig] = {
    "tiny-qwen2": replace(ORGANISMS["tiny-qwen2"], id_repeats=0.15, id_repeats_from=800, ioi=2.0, ioi_from=800,
                          ioi_kind="ioi_composed", ioi_words=0.5, head_lasso_steps=800),
    "tiny-llama": replace(ORGANISMS["tiny-llama"], id_repeats=0.15, id_repeats_from=1100),
    "tiny-gpt2": replace(ORGANISMS["tiny-gpt2"], curriculum=[(64, 500), (128, 800), (256, 900), (512, 400),
                                                             (1024, 600)],
                         id_repeats=0.15, id_repeats_from=700, ioi=0.5, ioi_from=700, ioi_kind="ioi_composed",
                         position_offsets=0.5, position_offsets_from=1300, position_offsets_right=0.5,
                         head_lasso=3e-3, head_lasso_steps=1300),
}


RECIPES = {"v1": ORGANISMS, "v2": ORGANISMS_V2}
DEFAULT_RECIPE = "v2"  # the bundled organisms' recipe (`python -m interp.organisms build NAME` rebuilds them)


def get_config(name_or_cfg: str | OrganismConfig | dict, recipe: str = DEFAULT_RECIPE) -> OrganismConfig:
    if isinstance(name_or_cfg, OrganismConfig):
        return name_or_cfg
    if isinstance(name_or_cfg, dict):
        d = dict(name_or_cfg)
        d["curriculum"] = [tuple(x) for x in d.get("curriculum", [(128, 10)])]
        return OrganismConfig(**d)
    if recipe not in RECIPES:
        raise KeyError(f"unknown recipe {recipe!r}; known: {sorted(RECIPES)}")
    if name_or_cfg not in RECIPES[recipe]:
        raise KeyError(f"unknown organism {name_or_cfg!r}; known: {sorted(RECIPES[recipe])}")
    return replace(RECIPES[recipe][name_or_cfg])


def config_with(name_or_cfg: str | OrganismConfig, overrides: list[str],
                recipe: str = DEFAULT_RECIPE) -> OrganismConfig:
    """An organism config with ``FIELD=VALUE`` overrides (values parsed as the field's type).

    ``curriculum`` takes ``LEN:STEPS,LEN:STEPS,...``.
    """
    cfg = get_config(name_or_cfg, recipe)
    names = {f.name: f for f in fields(OrganismConfig)}
    changes: dict = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in names or key in ("mix", "warm_mix"):
            settable = sorted(k for k in names if k not in ("mix", "warm_mix"))
            raise ValueError(f"bad override {item!r}: use FIELD=VALUE with FIELD one of {settable}")
        current = getattr(cfg, key)
        try:
            if key == "curriculum":
                value = [tuple(int(v) for v in part.split(":")) for part in raw.split(",")]
                if not value or any(len(p) != 2 or min(p) < 1 for p in value):
                    raise ValueError
            elif isinstance(current, bool):
                value = {"true": True, "false": False}[raw.lower()]
            else:
                value = type(current)(raw)
        except (ValueError, KeyError):
            raise ValueError(f"bad value in override {item!r} for field {key} "
                             f"(current value {current!r})") from None
        changes[key] = value
    return replace(cfg, **changes)


def hf_config(cfg: OrganismConfig, vocab_size: int, bos: int, eos: int, pad: int):
    """The transformers config for an organism."""
    common = {"vocab_size": vocab_size, "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
                  "tie_word_embeddings": True, "initializer_range": cfg.init_std}
    if cfg.arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(
            hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
            num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim,
            max_position_embeddings=cfg.max_positions, rope_theta=cfg.rope_theta,
            use_sliding_window=False, **common,
        )
    if cfg.arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
            num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim,
            max_position_embeddings=cfg.max_positions, rope_theta=cfg.rope_theta, **common,
        )
    if cfg.arch == "gpt2":
        from transformers import GPT2Config

        if cfg.hidden != cfg.heads * cfg.head_dim:
            raise ValueError("gpt2 needs hidden == heads * head_dim")
        return GPT2Config(
            n_embd=cfg.hidden, n_layer=cfg.layers, n_head=cfg.heads, n_inner=cfg.intermediate,
            n_positions=cfg.max_positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            **common,
        )
    raise ValueError(f"unknown arch {cfg.arch!r}")


def head_output_weights(model) -> list[torch.Tensor]:
    """Per layer, the attention output projection viewed as [heads, head_dim, hidden] (one slice per head)."""
    cfg = model.config
    heads = cfg.num_attention_heads if hasattr(cfg, "num_attention_heads") else cfg.n_head
    out = []
    if cfg.model_type == "gpt2":
        for block in model.transformer.h:
            w = block.attn.c_proj.weight  # Conv1D: [in = heads * head_dim, out = hidden]
            out.append(w.view(heads, -1, w.shape[1]))
    else:
        for layer in model.model.layers:
            w = layer.self_attn.o_proj.weight  # Linear: [hidden, heads * head_dim]
            out.append(w.t().reshape(heads, -1, w.shape[0]))
    return out


def head_lasso_penalty(model) -> torch.Tensor:
    """Sum over all heads of the Frobenius norm of the head's output-projection slice."""
    return sum(w.pow(2).sum(dim=(1, 2)).add(1e-12).sqrt().sum() for w in head_output_weights(model))


def build_model(cfg: OrganismConfig, vocab_size: int, bos: int = 0, eos: int = 1, pad: int = 2):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    hc = hf_config(cfg, vocab_size, bos, eos, pad)
    model = AutoModelForCausalLM.from_config(hc, attn_implementation="sdpa")
    return model


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _lr_at(cfg: OrganismConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    total = max(1, cfg.total_steps - cfg.warmup)
    p = min(1.0, (step - cfg.warmup) / total)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def _schedule(cfg: OrganismConfig, steps: int | None) -> list[int]:
    lengths = [length for length, n in cfg.curriculum for _ in range(n)]
    return lengths if steps is None else lengths[:steps]


def _optimizer(model, cfg: OrganismConfig):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "emb" not in name and "wte" not in name and "wpe" not in name
         else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8,
    )


def _extras(cfg: OrganismConfig, step: int) -> dict[str, float]:
    """The document kinds added to the mix at this step (recipe options with a start step)."""
    out = {}
    if cfg.id_repeats > 0 and step >= cfg.id_repeats_from:
        out["ids"] = cfg.id_repeats
    if cfg.ioi > 0 and step >= cfg.ioi_from:
        if cfg.ioi_words < 1:
            out[cfg.ioi_kind] = cfg.ioi * (1 - cfg.ioi_words)
        if cfg.ioi_words > 0:
            out[cfg.ioi_kind + "_words"] = cfg.ioi * cfg.ioi_words
    return out


def _packer(cache: dict, tok, cfg: OrganismConfig, step: int) -> Packer:
    """The packer of this step's mix (warm or main mix plus the active extras), built once per mix."""
    warm = step < cfg.warm_steps
    extra = _extras(cfg, step)
    key = (warm, tuple(sorted(extra.items())))
    if key not in cache:
        cache[key] = Packer(tok, {**(cfg.warm_mix if warm else cfg.mix), **extra}, cfg.answer_weight,
                            cfg.ioi_episode_tokens)
    return cache[key]


def _position_ids(cfg: OrganismConfig, step: int, length: int, bsz: int) -> torch.Tensor | None:
    """Position ids of a batch: None (0..length-1) unless position offsets are on at this step."""
    if not cfg.position_offsets or step < cfg.position_offsets_from or length >= cfg.max_positions:
        return None
    import random

    r = random.Random(f"offsets/{cfg.seed}/{step}")
    top = cfg.max_positions - length

    def start() -> int:
        if r.random() >= cfg.position_offsets:
            return 0
        if cfg.position_offsets_right and r.random() < cfg.position_offsets_right:
            return top
        return r.randint(0, top)

    starts = [start() for _ in range(bsz)]
    return torch.tensor(starts).unsqueeze(1) + torch.arange(length).unsqueeze(0)


def get_tokenizer(tokenizer_dir: str | Path | None = None):
    """The shared tokenizer: loaded from ``tokenizer_dir`` if present, else fitted (deterministic)."""
    d = Path(tokenizer_dir) if tokenizer_dir else TOKENIZER_DIR
    if (d / "tokenizer.json").exists():
        return load_tokenizer(d)
    return build_tokenizer()


def train(
    config: str | OrganismConfig | dict,
    out_dir: str | Path,
    steps: int | None = None,
    *,
    tokenizer_dir: str | Path | None = None,
    log: Callable[[str], None] = print,
    log_every: int = 25,
    threads: int = 1,
    command: str | None = None,
    snapshots: bool = False,
) -> dict:
    """Train an organism and save it (HF format + card) into ``out_dir``.

    ``steps`` truncates the curriculum (for tests).  With ``snapshots`` the model
    is also saved at the end of every curriculum phase into
    ``out_dir/snapshots/step-N`` (to inspect a long build while it runs).
    Returns the info dict that is also written to ``out_dir/organism.json``.
    """
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    cfg = get_config(config)
    tok = get_tokenizer(tokenizer_dir)
    bos, eos, pad = (tok.token_to_id(t) for t in (BOS, EOS, PAD))
    model = build_model(cfg, tok.get_vocab_size(), bos, eos, pad)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    opt = _optimizer(model, cfg)
    if cfg.position_offsets and cfg.arch != "gpt2":
        raise ValueError("position_offsets is for learned absolute positions (arch gpt2); "
                         f"{cfg.arch} uses rotary positions")
    if cfg.ioi_kind not in IOI_KINDS:
        raise ValueError(f"ioi_kind {cfg.ioi_kind!r}: valid kinds are {', '.join(IOI_KINDS)}")
    if not 0 <= cfg.ioi_words <= 1:
        raise ValueError(f"ioi_words is the fraction of IOI documents with word people, in [0, 1]; got {cfg.ioi_words}")
    packers: dict[tuple, Packer] = {}
    schedule = _schedule(cfg, steps)
    log(f"[{cfg.name}] {n_params:,} params, {len(schedule)} steps, curriculum {cfg.curriculum}")
    curve, t0, tokens, window, last_penalty = [], time.time(), 0, [], None
    for step, length in enumerate(schedule):
        bsz = max(1, cfg.tokens_per_step // length)
        pk = _packer(packers, tok, cfg, step)
        x, y, w, amask, cmask = pk.batch(cfg.seed, step, length, bsz)
        pos = _position_ids(cfg, step, length, bsz)
        for g in opt.param_groups:
            g["lr"] = _lr_at(cfg, step)
        logits = model(input_ids=x, position_ids=pos).logits
        nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
        nll = nll.view_as(w)
        loss = (nll * w).sum() / w.sum()
        lasso_on = (cfg.head_lasso and step >= cfg.head_lasso_from
                    and (not cfg.head_lasso_steps or step < cfg.head_lasso_steps))
        penalty = head_lasso_penalty(model) if lasso_on else None
        objective = loss + cfg.head_lasso * penalty if penalty is not None else loss
        opt.zero_grad(set_to_none=True)
        objective.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        tokens += x.numel()
        with torch.no_grad():
            lm = nll.mean().item()
            acc = ((logits.argmax(-1) == y) & amask).sum().item() / max(1, amask.sum().item())
            cl = nll[cmask].mean().item() if cmask.any() else float("nan")
        window.append((lm, acc, amask.any().item(), cl))
        last_penalty = round(penalty.item(), 3) if penalty is not None else None
        if (step + 1) % log_every == 0 or step + 1 == len(schedule):
            lm_m = sum(v[0] for v in window) / len(window)
            accs = [v[1] for v in window if v[2]]
            acc_m = sum(accs) / len(accs) if accs else float("nan")
            cls = [v[3] for v in window if math.isfinite(v[3])]
            cl_m = sum(cls) / len(cls) if cls else float("nan")
            el = time.time() - t0
            curve.append({"step": step + 1, "len": length, "lm_loss": round(lm_m, 4),
                          "answer_acc": round(acc_m, 4), "copy_loss": round(cl_m, 4),
                          "elapsed_s": round(el, 1),
                          **({"head_norm_sum": last_penalty} if last_penalty is not None else {})})
            log(f"[{cfg.name}] step {step + 1}/{len(schedule)} len {length} loss {lm_m:.4f} "
                f"answer_acc {acc_m:.3f} copy_loss {cl_m:.3f} lr {_lr_at(cfg, step):.2e} "
                f"{tokens / el:.0f} tok/s {el / 60:.1f} min"
                + (f" head-norm sum {last_penalty:.1f}" if last_penalty is not None else ""))
            window = []
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"non-finite loss at step {step}")
        if snapshots and step + 1 < len(schedule) and schedule[step + 1] != length:
            snap = Path(out_dir) / "snapshots" / f"step-{step + 1}"
            model.save_pretrained(str(snap), safe_serialization=True)
            save_tokenizer(tok, snap)
            model.train()
            log(f"[{cfg.name}] snapshot -> {snap}")
    train_s = time.time() - t0
    return save_organism(model, tok, cfg, out_dir, {
        "steps": len(schedule), "tokens_seen": tokens, "train_seconds": round(train_s, 1),
        "n_params": n_params, "loss_curve": curve, "final_lm_loss": curve[-1]["lm_loss"] if curve else None,
        "command": command or f"python -m interp.organisms build {cfg.name}",
    })


def save_organism(model, tok, cfg: OrganismConfig, out_dir, training: dict) -> dict:
    from interp.organisms.card import write_card, write_index

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    save_tokenizer(tok, out)
    info = {
        "name": cfg.name,
        "config": asdict(cfg),
        "training": training,
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "threads": torch.get_num_threads()},
        "sha256": sha256_file(out / "model.safetensors"),
        "eval": None,
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    write_card(out)
    if out.parent.resolve() == DATA_DIR.resolve():
        write_index(DATA_DIR)
    return info
