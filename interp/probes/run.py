"""Positional vs semantic probes over a store: config, shared plan, entry point, result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.sites import RESID_KINDS
from interp.probes.layer import TEST, TRAIN, VAL, LayerStats, cached_baseline


@dataclass
class ProbeConfig:
    """sites: sites to probe (default: the store's residual-stream sites, embeddings to last layer).
    Held-out sequences (test_fraction) score every probe; val_fraction of the rest chooses ridge
    penalties. top_tokens: classes of the token-identity probe (most frequent tokens). pos_dims:
    dimensions of the positional subspace (top PCs of pos[t]). min_position_count: positions (and
    classes) seen fewer times are left out of the PCA and of the class-mean subspaces. skip_first: the
    first positions of every sequence left out of every probe (special tokens are left out unless
    include_special): in a model without a BOS token the first token is the attention sink and can carry
    activations a hundred times the others' norm (massive activations, Sun et al. 2024), which then dominate
    pos[t], its PCA and the variance decomposition."""

    sites: tuple[str, ...] | None = None
    test_fraction: float = 0.2
    val_fraction: float = 0.2
    top_tokens: int = 64
    pos_dims: int = 2
    n_pcs: int = 10
    min_position_count: int = 5
    include_special: bool = False
    skip_first: int = 0  # positions < skip_first left out of every probe (e.g. a no-BOS model's massive first token)
    chunk_tokens: int = 8192
    random_draws: int = 200
    seed: int = 0
    heads: bool = True

    def __post_init__(self):
        if not 0 < self.test_fraction < 1 or not 0 <= self.val_fraction < 1:
            raise InvalidInputError("test_fraction must be in (0, 1) and val_fraction in [0, 1)")
        for k in ("top_tokens", "pos_dims", "n_pcs", "min_position_count", "chunk_tokens"):
            if getattr(self, k) < 1:
                raise InvalidInputError(f"{k} must be >= 1")
        if self.skip_first < 0:
            raise InvalidInputError(f"skip_first must be >= 0, got {self.skip_first}")


@dataclass
class ProbeResult:
    model: str
    store: dict
    config: dict
    layers: list[dict]
    heads: dict | None = None
    provenance: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ProbeResult:
        """A ProbeResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        """One row per probed site: its scalar results (R^2, accuracies, angles, baselines) as columns."""
        from interp.figures.tables import records_frame

        return records_frame(self.layers, model=self.model)


def site_depth(site: str) -> float:
    from interp.sites import Site

    s = Site.parse(site)
    return s.layer + (1 if s.kind == "resid_post" else 0) + (0.5 if s.kind not in RESID_KINDS else 0)


def probe_sites(store, sites: Sequence[str] | None = None) -> list[str]:
    """The store's residual sites in depth order (one per depth), or the given sites (checked)."""
    from interp.sites import Site

    if sites:
        for s in sites:
            store.check_site(s)
            if len(store.site_shape(s)) != 1:
                raise InvalidInputError(f"site {s} has per-token shape {store.site_shape(s)}; probes need vectors "
                                        f"(residual, attn_out, mlp_out or one head: L2.head_out.H1)")
        return sorted(dict.fromkeys(sites), key=site_depth)
    by_depth: dict[float, str] = {}
    for s in store.sites:
        if Site.parse(s).kind in RESID_KINDS:
            d = site_depth(s)
            if d not in by_depth or Site.parse(s).kind == "resid_pre":
                by_depth[d] = s
    if not by_depth:
        raise InvalidInputError(f"store {store.path} has no residual-stream sites (resid_pre/resid_post); cache "
                                f"them (`interp cache --sites resid`) or name sites to probe")
    return [by_depth[d] for d in sorted(by_depth)]


class Plan:
    """Everything the layers share: split by sequence, targets, shuffled targets, chunks."""

    def __init__(self, store, cfg: ProbeConfig):
        rng = np.random.default_rng(cfg.seed)
        self.pos = store.meta("positions").astype(np.int64)
        self.seq = store.meta("seq").astype(np.int64)
        self.cat = store.meta("category").astype(np.int64)
        tok = store.meta("tokens").astype(np.int64)
        self.valid = np.ones(len(self.pos), bool) if cfg.include_special else store.meta("special") == 0
        self.valid &= self.pos >= cfg.skip_first
        if not self.valid.any():
            raise InvalidInputError(f"no token left to probe: skip_first={cfg.skip_first} leaves out every position "
                                    f"of store {store.path} (its sequences have up to {int(self.pos.max()) + 1} tokens)"
                                    if len(self.pos) else f"store {store.path} holds no tokens")
        left = np.unique(self.pos[self.valid])
        need = max(2, cfg.pos_dims + 1)  # R^2 over one position is undefined; pos[t]'s PCs need more points
        if len(left) < need:
            raise InvalidInputError(
                f"skip_first={cfg.skip_first} leaves {len(left)} position(s) of store {store.path} to probe "
                f"({', '.join(map(str, left[:5].tolist()))}; its sequences have up to {int(self.pos.max()) + 1} tokens): "
                f"the position probe and the {cfg.pos_dims}-dim positional subspace need at least {need}; lower "
                f"--skip-first or cache longer sequences")
        n_seq = store.n_sequences
        if n_seq < 10:
            raise InvalidInputError(f"store {store.path} holds {n_seq} sequences; probes need at least 10 "
                                    f"(held-out sequences score them)")
        perm = rng.permutation(n_seq)
        n_test = max(1, int(round(cfg.test_fraction * n_seq)))
        n_val = int(round(cfg.val_fraction * (n_seq - n_test)))
        seq_split = np.full(n_seq, TRAIN)
        seq_split[perm[:n_test]] = TEST
        seq_split[perm[n_test:n_test + n_val]] = VAL
        self.split = seq_split[self.seq]
        self.n_positions = int(self.pos.max()) + 1 if len(self.pos) else 1
        self.categories = list(store.manifest.get("categories", []))
        self.n_classes = len(self.categories)
        fit = self.valid & (self.split != TEST)
        self.cat_train_counts = np.bincount(self.cat[fit], minlength=self.n_classes)
        counts = np.bincount(tok[fit])
        order = np.argsort(-counts, kind="stable")
        self.top_tokens = order[:cfg.top_tokens][counts[order[:cfg.top_tokens]] > 0]
        self.n_tokens = len(self.top_tokens)
        lookup = np.full(max(int(tok.max()) + 1, 1) if len(tok) else 1, -1)
        lookup[self.top_tokens] = np.arange(self.n_tokens)
        self.tok_class = np.where(self.valid, lookup[tok], -1)
        self.tok_train_counts = np.bincount(self.tok_class[fit & (self.tok_class >= 0)], minlength=self.n_tokens)
        self.pos_shuf = self._shuffle(self.pos, fit, rng)
        self.cat_shuf = self._shuffle(self.cat, fit, rng)
        self.tok_shuf = self._shuffle(self.tok_class, fit & (self.tok_class >= 0), rng)
        vp = self.pos[self.valid]
        pc = np.bincount(vp, minlength=self.n_positions)
        self.balanced = bool(len(vp) and np.all(pc[pc > 0] == n_seq))
        self.chunks = self._chunks(store, cfg.chunk_tokens)

    @staticmethod
    def _shuffle(y, where, rng):
        out = y.copy()
        idx = np.flatnonzero(where)
        out[idx] = y[rng.permutation(idx)]
        return out

    def _chunks(self, store, size: int) -> list[tuple[int, int, int]]:
        """(shard, first row, end row): runs of whole sequences of about `size` tokens."""
        out = []
        for i, s in enumerate(store.shards):
            a, end = s["tok_start"], s["tok_start"] + s["n_tokens"]
            if end <= a:
                continue
            starts = a + np.flatnonzero(np.r_[True, self.seq[a + 1:end] != self.seq[a:end - 1]])
            cur = a
            for st in [int(x) for x in starts[1:]] + [end]:
                if st - cur >= size or st == end:
                    out.append((i, cur, st))
                    cur = st
        return out

    def _onehot(self, y, n):
        out = np.zeros((len(y), n))
        ok = y >= 0
        out[np.flatnonzero(ok), y[ok]] = 1.0
        return out

    def targets_a(self, rows) -> np.ndarray:
        C = self.n_classes
        return np.concatenate([self.pos[rows, None].astype(np.float64), self.pos_shuf[rows, None].astype(np.float64),
                               self._onehot(self.cat[rows], C), self._onehot(self.cat_shuf[rows], C)], axis=1)

    def targets_b(self, rows) -> np.ndarray:
        K = self.n_tokens
        return np.concatenate([self._onehot(self.tok_class[rows], K), self._onehot(self.tok_shuf[rows], K)], axis=1)


def run_probes(store, config: ProbeConfig | None = None, model=None,
               progress: Callable[[int], None] | None = None) -> ProbeResult:
    """Per-site positional and semantic probes, subspace angles, decomposition, PCA of pos[t].

    store: an ActivationStore or its path. model (optional): checked to be the store's model, and
    then its heads are classified (structure vs semantic; `config.heads`).
    `progress(n)` advances by chunks processed (total: `probe_steps(store, config)`).
    """
    from interp.store import ActivationStore

    cfg = config or ProbeConfig()
    if not isinstance(store, ActivationStore):
        store = ActivationStore(store)
    if model is not None:
        store.check_model(model)
    if not store.complete:
        raise InvalidInputError(f"store {store.path} is incomplete ({store.n_sequences} of "
                                f"{store.manifest['identity'].get('n_sequences', '?')} sequences); rerun the same "
                                f"`interp cache` command to finish it")
    sites = probe_sites(store, cfg.sites)
    plan = Plan(store, cfg)
    baseline = cached_baseline(cfg.random_draws, cfg.seed)
    layers = []
    for site in sites:
        ls = LayerStats(store, site, plan, progress)
        ls.pass1()
        ls.fit()
        ls.pass2()
        layers.append({"site": site, "depth": site_depth(site), **ls.results(cfg, baseline)})
    heads = None
    if model is not None and cfg.heads:
        from interp.probes.heads import HeadConfig, classify_heads

        heads = classify_heads(model, HeadConfig(seed=cfg.seed)).to_dict()
    prov = {}
    if model is not None:
        from interp.runtime.provenance import provenance

        prov = provenance(model)
    m = store.manifest
    info = {"path": str(store.path), "n_tokens": store.n_tokens, "n_probed_tokens": int(plan.valid.sum()),
            "n_sequences": store.n_sequences,
            "dataset": m.get("dataset"), "model_id": store.model.get("id"),
            "max_length": m.get("config", {}).get("max_length"),
            "n_test_sequences": int(len(np.unique(plan.seq[plan.split == TEST]))),
            "categories": plan.categories}
    return ProbeResult(model=store.model.get("name"), store=info, config=asdict(cfg), layers=layers, heads=heads,
                       provenance=prov)


def probe_steps(store, config: ProbeConfig | None = None) -> int:
    cfg = config or ProbeConfig()
    plan_chunks = Plan(store, cfg).chunks
    return 2 * len(plan_chunks) * len(probe_sites(store, cfg.sites))
