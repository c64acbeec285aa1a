"""`interp patch`'s clean/corrupt pairs: a --pairs file or a built-in --task (niah, repeated, ioi), and the IOI
behaviour of IOI pairs (ioi.json)."""

from __future__ import annotations

from interp.errors import InvalidInputError

TASKS = ("niah", "repeated", "ioi")


def _check_corrupt(corrupt, task) -> None:
    """--corrupt: ioi only, one of the IOI corruptions (checked before the model loads)."""
    from interp.patching.pairs import IOI_CORRUPTIONS

    if corrupt is None:
        return
    if task != "ioi":
        raise InvalidInputError("--corrupt applies to --task ioi only")
    if corrupt not in IOI_CORRUPTIONS:
        raise InvalidInputError(f"--corrupt {corrupt!r}: valid are {', '.join(IOI_CORRUPTIONS)}")


def _pairs(m, pairs_file, task, lengths, depths, seeds, copy_length, seed, n_pairs=32, corrupt=None):
    from interp.patching import ioi_pairs, niah_pairs, read_pairs, repeated_pairs
    from interp.cli.options import niah_config
    from interp.tasks.niah import niah_for_model

    if pairs_file is not None and task is not None:
        raise InvalidInputError("give --pairs FILE or --task, not both")
    _check_corrupt(corrupt, task)
    if pairs_file is not None:
        return read_pairs(pairs_file, m.tokenizer)
    task = task or "niah"
    if task not in TASKS:
        raise InvalidInputError(f"--task {task!r}: valid built-in tasks are {', '.join(TASKS)} (or --pairs FILE)")
    if task == "niah":
        if m.tokenizer is None:
            raise InvalidInputError("the niah task needs a tokenizer: this model was loaded without one")
        # the corpus needles on every model: value patching swaps their one-token code word
        niah = niah_for_model(m, niah_config(lengths, depths, seeds, None, "corpus", "\\n", None), decode=False)
        return niah_pairs(m.tokenizer, niah, seed)
    if task == "ioi":
        # held-out names x held-out templates of interp.corpus.ioi; the corrupt prompt per --corrupt
        return ioi_pairs(m.tokenizer, n=n_pairs, seed=seed, corrupt=corrupt or "both")
    return repeated_pairs(m, length=copy_length, n=seeds, seed=seed)


def _ioi_scores(m, ps, o, task, n_boot, seed) -> dict | None:
    """--task ioi: the model's IOI behaviour on the pairs (logit difference IO - S and accuracy, with CIs; the
    heads' attention from the end to the names), written to ioi.json."""
    if task != "ioi":
        return None
    from interp.patching.ioi import ioi_scores
    from interp.runtime.jsonio import write_json

    res = ioi_scores(m, ps, n_boot=n_boot, seed=seed)
    write_json(res, o / "ioi.json")
    return res
