"""What a patching grid will run, before it runs: the base and donor sides of the pairs, the position axis, the
(pair, cell) rows of every grid site, and the work they ask (`planned_work`: rows and recomputed token
positions, the measure a grid too large to start is refused by); `check_pairs` refuses pairs no method can run."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.patching.cells import GRID_SITES
from interp.patching.config import PatchingConfig
from interp.patching.pairs import PatchPair


def grid_shape(model, site: str, n_pos: int) -> tuple[int, ...]:
    """The size of each of `site`'s axes (layer, position: `n_pos` labels, head, kv_head) on `model`."""
    spec = model.spec
    axes = GRID_SITES[site][1]
    size = {"layer": spec.n_layers, "position": n_pos, "head": spec.n_heads, "kv_head": spec.n_kv_heads}
    return tuple(size[a] for a in axes)


def position_axis(lengths: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Labels of the position axis: offsets from each pair's anchor that some pair has. End alignment
    uses anchor = length, so the labels are -T..-1 (-1 = the last token)."""
    return np.arange(int((-anchors).min()), int((lengths - anchors).max()))


def _enumerate(model, site: str, lengths: np.ndarray, anchors: np.ndarray, labels: np.ndarray):
    """(pair, cell index tuples [n, len(axes)], k = tokens from the end of the pair's prompt, 0 for
    all-position cells) of every row of `site`."""
    shape = grid_shape(model, site, len(labels))
    axes = GRID_SITES[site][1]
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1).reshape(-1, len(shape))
    pairs, cells, ks = [], [], []
    for p, (n, a) in enumerate(zip(lengths, anchors)):
        if "position" in axes:
            pos = a + labels[grid[:, axes.index("position")]]  # the cell's token index in this pair
            ok = (pos >= 0) & (pos < n)
            ks.append((n - pos)[ok])
        else:
            ok = np.ones(len(grid), dtype=bool)
            ks.append(np.zeros(int(ok.sum()), dtype=int))
        pairs.append(np.full(int(ok.sum()), p))
        cells.append(grid[ok])
    return np.concatenate(pairs), np.concatenate(cells), np.concatenate(ks)


def sides(pairs, direction: str):
    """(base prompts, donor prompts, lengths, max length): denoising runs the corrupt prompts with clean
    activations; noising the reverse."""
    denoise = direction == "denoising"
    lengths = np.array([p.n for p in pairs])
    return ([p.corrupt if denoise else p.clean for p in pairs], [p.clean if denoise else p.corrupt for p in pairs],
            lengths, int(lengths.max()))


def check_pairs(model, pairs) -> None:
    """Refuses what no patching method can run: no pairs, an encoder, answer tokens outside the vocabulary."""
    if not pairs:
        raise InvalidInputError("no clean/corrupt pairs to patch")
    if not model.spec.causal:
        raise InvalidInputError(f"{model.spec.architecture} is an encoder: patching compares next-token logits")
    for p in pairs:
        for t in (p.answer, p.wrong):
            if not 0 <= t < model.spec.d_vocab:
                raise InvalidInputError(f"{p.source}: token id {t} is outside the vocabulary 0..{model.spec.d_vocab - 1}")


def aligned_axis(pairs, config, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(anchors, labels): each pair's anchor token (its length when end-aligned) and the position axis."""
    if config.align == "anchor":
        missing = [p.source or str(i) for i, p in enumerate(pairs) if p.anchor is None]
        if missing:
            raise InvalidInputError(f"align='anchor' needs an anchor token in every pair; missing in {missing[:3]}"
                                    f"{'' if len(missing) <= 3 else f' and {len(missing) - 3} more'} (a pairs "
                                    'file gives it as an "anchor" field per line: a token index or text of the '
                                    "clean prompt)")
        anchors = np.array([p.anchor for p in pairs])
    else:
        anchors = lengths
    labels = position_axis(lengths, anchors)
    if config.positions is not None:
        want = sorted(set(int(x) for x in config.positions))
        bad = [x for x in want if x not in set(labels.tolist())]
        if bad or not want:
            raise InvalidInputError(f"positions {bad or want} are not on the position axis {int(labels[0])}.."
                                    f"{int(labels[-1])} ({config.align}-aligned)")
        labels = np.array(want)
    return anchors, labels


def site_rows(model, site: str, config, lengths, anchors, labels):
    """`_enumerate`'s rows of `site`, kept to `config.cells` when it names some."""
    row_pair, row_cell, row_k = _enumerate(model, site, lengths, anchors, labels)
    if config.cells is not None:
        want = {tuple(int(i) for i in c) for c in config.cells.get(site, ())}
        keep = np.array([tuple(c) in want for c in row_cell.tolist()], dtype=bool)
        row_pair, row_cell, row_k = row_pair[keep], row_cell[keep], row_k[keep]
    return row_pair, row_cell, row_k


def planned_rows(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None) -> int:
    """How many (pair, cell) rows `run_patching` will evaluate: the total of its progress bar."""
    return planned_work(model, pairs, config)[0]


def planned_work(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None) -> tuple[int, int]:
    """(rows, tokens) of the grid `run_patching` will evaluate, counted before it runs: its (pair, cell) rows
    and the token positions they recompute (a row patching position p of an n-token prompt recomputes the n - p
    positions from p on; an all-position cell all n), the measure a grid too large to start is refused by."""
    config = config or PatchingConfig()
    pairs = list(pairs)
    lengths = sides(pairs, config.direction)[2]
    anchors, labels = aligned_axis(pairs, config, lengths)
    rows = tokens = 0
    for s in config.sites:
        row_pair, _, row_k = site_rows(model, s, config, lengths, anchors, labels)
        rows += len(row_pair)
        tokens += int(np.where(row_k > 0, row_k, lengths[row_pair]).sum())
    return rows, tokens
