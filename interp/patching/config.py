"""PatchingConfig: what a patching run (exact, attribution or path) is asked for, checked when it is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from interp.errors import InvalidInputError
from interp.patching.cells import check_sites
from interp.patching.metrics import METRICS

DIRECTIONS = ("denoising", "noising")
ALIGNS = ("end", "anchor")


@dataclass
class PatchingConfig:
    """`sites`: grid sites (resid_pre, resid_post, attn_out, mlp_out, head_out, head_out_by_pos, q, k, v).
    `direction`: denoising (clean into corrupt) | noising. `metric`: logit_diff (logit(answer) - logit(wrong)) |
    logprob (log p(answer)) | prob (p(answer)) | kl (KL(donor || run) of the next-token distributions in nats: 0 for
    the donor run, so the normalised value 1 - KL(donor || patched) / KL(donor || base) is the share of the
    distance to the donor's whole distribution that the patch closes; exact patching only) | a callable;
    `normalize`: (patched - base) / (donor - base), pairs whose gap is below `min_gap` left out. `max_batch`:
    rows per forward; `reuse_prefix`: start per-position cells from the base run's KV cache; `skip_layers`: start
    each row at its cell's layer from the base run's residual stream. `align`: end |
    anchor position axis; `positions` / `cells`: only those. `n_boot`: bootstrap resamples for the CIs; `n_perm`:
    sign patterns drawn per cell test (every pattern when 2^n_pairs <= max(n_perm, 4096))."""

    sites: tuple[str, ...] = ("resid_pre",)
    direction: str = "denoising"
    metric: str | Callable = "logit_diff"
    normalize: bool = True
    max_batch: int | None = None  # rows per forward; default: about 2k tokens per pass on CPU, 16k on CUDA
    reuse_prefix: bool = True  # per-position cells start from the base run's KV cache of earlier positions
    skip_layers: bool = True  # rows start at their cell's layer from the base run's residual stream there
    align: str = "end"  # position axis: "end" (-1 = last token) or "anchor" (0 = each pair's anchor token)
    positions: tuple[int, ...] | None = None  # only these labels of the position axis (default: all)
    cells: dict | None = None  # {site: [cell index tuples over the site's axes]}: only those (e.g. AtP checks)
    min_gap: float = 1e-6
    n_boot: int = 1000
    n_perm: int = 2000  # sign patterns per cell test when 2^n_pairs is larger (else all are enumerated)
    seed: int = 0

    def __post_init__(self):
        self.sites = check_sites(self.sites if not isinstance(self.sites, str) else self.sites.split(","))
        if self.direction not in DIRECTIONS:
            raise InvalidInputError(f"unknown direction {self.direction!r}; valid: {', '.join(DIRECTIONS)}")
        if isinstance(self.metric, str) and self.metric not in METRICS:
            raise InvalidInputError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)} or a callable")
        if self.align not in ALIGNS:
            raise InvalidInputError(f"unknown alignment {self.align!r}; valid: {', '.join(ALIGNS)}")
        if self.max_batch is not None and self.max_batch < 1:
            raise InvalidInputError("max_batch must be >= 1")
