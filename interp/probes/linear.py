"""Linear probes fitted from streamed sufficient statistics (exact ridge regression, one pass).

A probe never holds its training data: `Moments` accumulates n, sum x, sum y, X'X, X'y, y'y over
chunks (float64); ridge solutions for any penalty follow from one eigendecomposition of the
centered X'X, and a validation split's squared error follows from its own moments, so the
penalty is chosen without a second pass. Classifiers are least-squares one-vs-rest on one-hot
targets (argmax of the ridge outputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALPHA_GRID = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)  # times the mean eigenvalue of the centered X'X / n


class Moments:
    """Streaming sufficient statistics of rows X [n, d] and targets Y [n, m]."""

    def __init__(self, d: int, m: int):
        self.n = 0
        self.sx = np.zeros(d)
        self.sy = np.zeros(m)
        self.sxx = np.zeros((d, d))
        self.sxy = np.zeros((d, m))
        self.syy = np.zeros(m)

    def update(self, X: np.ndarray, Y: np.ndarray) -> None:
        if not len(X):
            return
        self.n += len(X)
        self.sx += X.sum(0)
        self.sy += Y.sum(0)
        self.sxx += X.T @ X
        self.sxy += X.T @ Y
        self.syy += (Y * Y).sum(0)

    def __add__(self, other: "Moments") -> "Moments":
        out = Moments(len(self.sx), len(self.sy))
        for k in ("n", "sx", "sy", "sxx", "sxy", "syy"):
            setattr(out, k, getattr(self, k) + getattr(other, k))
        return out


@dataclass
class Ridge:
    W: np.ndarray  # [d, m]
    b: np.ndarray  # [m]
    alpha: float  # absolute penalty

    def predict(self, X: np.ndarray) -> np.ndarray:
        return X @ self.W + self.b


class RidgePath:
    """Ridge solutions of one training Moments for many penalties (one eigendecomposition)."""

    def __init__(self, mom: Moments):
        if mom.n < 2:
            raise ValueError("ridge needs at least 2 training rows")
        n = mom.n
        self.mx, self.my = mom.sx / n, mom.sy / n
        cxx = mom.sxx - n * np.outer(self.mx, self.mx)
        cxy = mom.sxy - n * np.outer(self.mx, self.my)
        self.evals, self.evecs = np.linalg.eigh((cxx + cxx.T) / 2)
        self.evals = np.clip(self.evals, 0, None)
        self.scale = max(float(self.evals.mean()), 1e-12)
        self.proj = self.evecs.T @ cxy

    def solve(self, rel_alpha: float, cols=slice(None)) -> Ridge:
        alpha = rel_alpha * self.scale
        W = self.evecs @ (self.proj[:, cols] / (self.evals + alpha)[:, None])
        return Ridge(W, self.my[cols] - self.mx @ W, alpha)


def sse(mom: Moments, r: Ridge, cols=slice(None)) -> np.ndarray:
    """Per-target sum of squared errors of `r` (targets `cols`) on the rows summarised by `mom`."""
    W, b = r.W, r.b
    pred_y = np.einsum("dm,dm->m", W, mom.sxy[:, cols]) + b * mom.sy[cols]
    pred_sq = np.einsum("dm,de,em->m", W, mom.sxx, W) + 2 * b * (mom.sx @ W) + mom.n * b * b
    return mom.syy[cols] - 2 * pred_y + pred_sq


def fit_ridge_groups(train: Moments, val: Moments, groups: dict, grid=ALPHA_GRID) -> dict:
    """For each target group (name -> column slice): choose the penalty by the squared error on `val`
    of a fit on `train`, then refit on train + val. Returns name -> (Ridge, chosen relative penalty)."""
    path = RidgePath(train)
    full = RidgePath(train + val) if val.n else path
    out = {}
    for name, cols in groups.items():
        if val.n:
            errs = [sse(val, path.solve(a, cols), cols).sum() for a in grid]
            best = grid[int(np.argmin(errs))]
        else:
            best = grid[len(grid) // 2]
        out[name] = (full.solve(best, cols), best)
    return out


def r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss = float(((y - y.mean()) ** 2).sum())
    return float("nan") if ss == 0 else 1.0 - float(((y - pred) ** 2).sum()) / ss


def orthonormal_basis(M: np.ndarray, rtol: float = 1e-8) -> np.ndarray:
    """Orthonormal basis [d, k] of the column span of M [d, m] (numerical rank)."""
    if M.size == 0:
        return np.zeros((M.shape[0], 0))
    U, s, _ = np.linalg.svd(M, full_matrices=False)
    keep = s > rtol * (s[0] if len(s) else 0)
    return U[:, keep]


def principal_angles(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Principal angles (degrees, ascending) between the column spans of A and B."""
    from scipy.linalg import subspace_angles

    if A.shape[1] == 0 or B.shape[1] == 0:
        return np.zeros(0)
    return np.sort(np.degrees(subspace_angles(A, B)))


def random_angle_baseline(d: int, k: int, m: int, draws: int = 200, seed: int = 0) -> dict:
    """Smallest principal angle between random k- and m-dimensional subspaces of R^d."""
    rng = np.random.default_rng(seed)
    mins = []
    for _ in range(draws):
        A = np.linalg.qr(rng.standard_normal((d, k)))[0]
        B = np.linalg.qr(rng.standard_normal((d, m)))[0]
        mins.append(principal_angles(A, B)[0])
    mins = np.array(mins)
    return {"min_angle_median": float(np.median(mins)), "min_angle_p05": float(np.percentile(mins, 5)),
            "draws": draws}
