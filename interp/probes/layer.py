"""The probes of one site, in two streamed passes over the store (chunks of whole sequences).

Pass 1 accumulates the probes' sufficient statistics (train and validation sequences), per-position
and per-class sums, and the total sum of squares. Pass 2 scores the fitted probes on held-out
sequences and computes the decomposition h[seq, t] = mean + pos[t] + ctx[seq] + rest, where
pos[t] is the mean of h - mean over tokens at position t, ctx[seq] the mean of h - mean - pos[t]
over the sequence's tokens, and rest what remains; SS(h - mean) = SS(pos) + SS(ctx) + SS(rest)
holds exactly (each part is a group mean of the residual before it).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from interp.probes.linear import (Moments, fit_ridge_groups, orthonormal_basis, principal_angles, r2,
                     random_angle_baseline)

TRAIN, VAL, TEST = 0, 1, 2


def _add_rows(sums: np.ndarray, counts: np.ndarray, groups: np.ndarray, X: np.ndarray) -> None:
    """sums[g] += sum of the rows of X in group g; counts[g] += their number (sparse one-hot product)."""
    from scipy.sparse import csr_matrix

    onehot = csr_matrix((np.ones(len(groups)), (groups, np.arange(len(groups)))), shape=(len(sums), len(groups)))
    sums += onehot @ X
    counts += np.bincount(groups, minlength=len(counts))


def _accuracy(y, pred) -> float:
    return float((y == pred).mean()) if len(y) else float("nan")


class LayerStats:
    """Runs both passes for one site. `plan` is the shared Plan (targets, splits, chunks)."""

    def __init__(self, store, site: str, plan, progress: Callable[[int], None] | None = None):
        self.store, self.site, self.plan = store, site, plan
        self.d = store.site_shape(site)[0]
        self.progress = progress or (lambda n: None)
        C, K = plan.n_classes, plan.n_tokens
        d = self.d
        self.momA = {TRAIN: Moments(d, 2 + 2 * C), VAL: Moments(d, 2 + 2 * C)}
        self.momB = {TRAIN: Moments(d, 2 * K), VAL: Moments(d, 2 * K)}
        self.pos_sum = np.zeros((plan.n_positions, d))
        self.pos_cnt = np.zeros(plan.n_positions)
        self.cat_sum = np.zeros((C, d))
        self.cat_cnt = np.zeros(C)
        self.tok_sum = np.zeros((K, d))
        self.tok_cnt = np.zeros(K)
        self.total = np.zeros(d)
        self.total_sq = 0.0
        self.n = 0

    def _chunks(self):
        for shard, a, b in self.plan.chunks:
            off = self.store.shards[shard]["tok_start"]
            x = self.store.numpy(self.site, shard)[a - off:b - off]
            rows = np.arange(a, b)
            v = self.plan.valid[rows]
            yield rows[v], np.asarray(x[v], dtype=np.float64)
            self.progress(1)

    # ---- pass 1 ----------------------------------------------------------------------------
    def pass1(self):
        p = self.plan
        for rows, X in self._chunks():
            split = p.split[rows]
            YA = p.targets_a(rows)
            tk = p.tok_class[rows]
            for s in (TRAIN, VAL):
                m = split == s
                self.momA[s].update(X[m], YA[m])
                mb = m & (tk >= 0)
                self.momB[s].update(X[mb], p.targets_b(rows[mb]))
            _add_rows(self.pos_sum, self.pos_cnt, p.pos[rows], X)
            fit = split != TEST
            _add_rows(self.cat_sum, self.cat_cnt, p.cat[rows[fit]], X[fit])
            mb = fit & (tk >= 0)
            _add_rows(self.tok_sum, self.tok_cnt, tk[mb], X[mb])
            self.total += X.sum(0)
            self.total_sq += float((X * X).sum())
            self.n += len(X)

    # ---- fit -------------------------------------------------------------------------------
    def fit(self):
        C, K = self.plan.n_classes, self.plan.n_tokens
        ga = fit_ridge_groups(self.momA[TRAIN], self.momA[VAL], {"pos": slice(0, 1), "pos_shuf": slice(1, 2),
                                                                 "cat": slice(2, 2 + C), "cat_shuf": slice(2 + C, None)})
        gb = fit_ridge_groups(self.momB[TRAIN], self.momB[VAL], {"tok": slice(0, K), "tok_shuf": slice(K, None)})
        self.probes = {**ga, **gb}
        self.mean = self.total / self.n
        seen = self.pos_cnt > 0
        self.posvec = np.zeros_like(self.pos_sum)
        self.posvec[seen] = self.pos_sum[seen] / self.pos_cnt[seen, None] - self.mean

    # ---- pass 2 ----------------------------------------------------------------------------
    def pass2(self):
        p = self.plan
        preds = {k: [] for k in ("pos", "pos_shuf", "cat", "cat_shuf", "tok", "tok_shuf")}
        truth = {"pos": [], "cat": [], "tok": []}
        ss_r1 = ss_ctx = 0.0
        for rows, X in self._chunks():
            te = p.split[rows] == TEST
            Xt = X[te]
            for k in ("pos", "pos_shuf"):
                preds[k].append(self.probes[k][0].predict(Xt)[:, 0])
            for k in ("cat", "cat_shuf"):
                preds[k].append(self.probes[k][0].predict(Xt).argmax(1))
            tk = p.tok_class[rows[te]]
            for k in ("tok", "tok_shuf"):
                preds[k].append(self.probes[k][0].predict(Xt[tk >= 0]).argmax(1))
            truth["pos"].append(p.pos[rows[te]].astype(np.float64))
            truth["cat"].append(p.cat[rows[te]])
            truth["tok"].append(tk[tk >= 0])
            r1 = X - self.mean - self.posvec[p.pos[rows]]
            ss_r1 += float((r1 * r1).sum())
            seq = p.seq[rows]
            starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
            sums = np.add.reduceat(r1, starts, axis=0)
            counts = np.diff(np.r_[starts, len(seq)])
            ss_ctx += float(((sums * sums).sum(1) / counts).sum())
        self.preds = {k: np.concatenate(v) for k, v in preds.items()}
        self.truth = {k: np.concatenate(v) for k, v in truth.items()}
        self.ss_r1, self.ss_ctx = ss_r1, ss_ctx

    # ---- summaries -------------------------------------------------------------------------
    def results(self, cfg, baseline: Callable) -> dict:
        p, t, pr = self.plan, self.truth, self.preds
        ss_total = self.total_sq - self.n * float(self.mean @ self.mean)
        ss_pos = float((self.pos_cnt * (self.posvec ** 2).sum(1)).sum())
        ss_rest = self.ss_r1 - self.ss_ctx
        position = {"r2_test": r2(t["pos"], pr["pos"]), "r2_shuffled": r2(t["pos"], pr["pos_shuf"]),
                    "mae_test": float(np.abs(t["pos"] - pr["pos"]).mean()),
                    "alpha": self.probes["pos"][1], "n_fit": self.momA[TRAIN].n + self.momA[VAL].n,
                    "n_test": int(len(t["pos"]))}
        category = self._classifier("cat", p.cat_train_counts, p.categories)
        token = self._classifier("tok", p.tok_train_counts, [str(x) for x in p.top_tokens])
        decomposition = {"share_pos": ss_pos / ss_total, "share_ctx": self.ss_ctx / ss_total,
                         "share_rest": ss_rest / ss_total, "ss_total": ss_total, "n_tokens": self.n,
                         "balanced": p.balanced}
        pca = self._pos_pca(cfg)
        angles = self._angles(cfg, pca.pop("_components"), ss_pos, baseline)
        return {"position": position, "category": category, "token": token, "decomposition": decomposition,
                "pos_pca": pca, "angles": angles}

    def _classifier(self, key: str, train_counts: np.ndarray, names) -> dict:
        y = self.truth[key]
        majority = int(np.argmax(train_counts)) if train_counts.sum() else 0
        return {"acc_test": _accuracy(y, self.preds[key]), "acc_shuffled": _accuracy(y, self.preds[key + "_shuf"]),
                "acc_majority": _accuracy(y, np.full(len(y), majority)), "majority_class": str(names[majority]),
                "n_classes": int((train_counts > 0).sum()), "alpha": self.probes[key][1], "n_test": int(len(y))}

    def _pos_pca(self, cfg) -> dict:
        from sklearn.decomposition import PCA

        keep = np.flatnonzero(self.pos_cnt >= cfg.min_position_count)
        P = self.posvec[keep]
        n_pc = min(cfg.n_pcs, len(keep), self.d)
        if n_pc < 2:
            return {"n_positions": int(len(keep)), "_components": np.zeros((0, self.d))}
        pca = PCA(n_components=n_pc).fit(P)
        scores = pca.transform(P)
        ev = pca.explained_variance_
        contiguous = np.all(np.diff(keep) == 1)
        smooth = [float(np.corrcoef(scores[:-1, i], scores[1:, i])[0, 1]) for i in range(n_pc)] if contiguous else []
        steps = float((np.diff(P, axis=0) ** 2).sum())
        spread = float(((P - P.mean(0)) ** 2).sum())
        return {"n_positions": int(len(keep)), "positions": keep.tolist(),
                "explained_variance_ratio": pca.explained_variance_ratio_.tolist(),
                "participation_ratio": float(ev.sum() ** 2 / (ev ** 2).sum()),
                "lag1_autocorrelation": smooth,
                "curve_smoothness": 1.0 - steps / (2 * spread) if contiguous and spread > 0 else None,
                "curve": scores[:, :3].round(5).tolist(), "_components": pca.components_}

    def _angles(self, cfg, comps: np.ndarray, ss_pos: float, baseline: Callable) -> dict:
        d = self.d
        k = min(cfg.pos_dims, len(comps))
        E_pos = comps[:k].T
        out = {"pos_dims": k, "d_model": d}

        def class_means(sums, cnts):
            ok = cnts >= cfg.min_position_count
            return (sums[ok] / cnts[ok, None] - self.mean).T, cnts[ok]

        def readout(W):  # class readout directions, centred across classes
            return W - W.mean(1, keepdims=True)

        w_pos = self.probes["pos"][0].W
        for name, sums, cnts, probe in (("category", self.cat_sum, self.cat_cnt, "cat"),
                                        ("token", self.tok_sum, self.tok_cnt, "tok")):
            M, _ = class_means(sums, cnts)
            E_sem = orthonormal_basis(M)
            R_sem = orthonormal_basis(readout(self.probes[probe][0].W[:, cnts > 0]))
            enc = principal_angles(E_pos, E_sem)
            rd = principal_angles(w_pos / np.linalg.norm(w_pos), R_sem)
            in_sem = float((self.pos_cnt * ((self.posvec @ E_sem) ** 2).sum(1)).sum() / ss_pos) if ss_pos else None
            sem_ss = float((M ** 2).sum())
            in_pos = float(((M.T @ E_pos) ** 2).sum() / sem_ss) if sem_ss and k else None
            out[name] = {
                "sem_dims": int(E_sem.shape[1]),
                "encoding_angles": enc.round(3).tolist(),
                "encoding_min_angle": float(enc[0]) if len(enc) else None,
                "encoding_random": baseline(d, k, E_sem.shape[1]) if k and E_sem.shape[1] else None,
                "readout_angle": float(rd[0]) if len(rd) else None,
                "readout_random": baseline(d, 1, R_sem.shape[1]) if R_sem.shape[1] else None,
                "pos_var_in_sem_subspace": in_sem, "pos_var_in_sem_random": E_sem.shape[1] / d,
                "sem_var_in_pos_subspace": in_pos, "sem_var_in_pos_random": k / d,
            }
        return out


def cached_baseline(draws: int, seed: int):
    memo: dict = {}

    def f(d, k, m):
        if (d, k, m) not in memo:
            memo[(d, k, m)] = random_angle_baseline(d, k, m, draws=draws, seed=seed)
        return memo[(d, k, m)]
    return f
