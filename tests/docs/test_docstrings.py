"""Every public name of `interp` (and every public method of its classes) has a docstring of its own
(a dataclass's generated `Name(field, ...)` signature does not count): the core, the names it still answers
(aliases of their homes) and every name of `interp.analyses` but the result classes."""

import inspect

import interp
import interp.analyses
from interp.runtime.records import RECORDS

RESULTS = {r.result.rpartition(".")[2] for r in RECORDS if r.result}
NAMES = sorted({*interp.__all__, *interp._MOVED, *(n for n in interp.analyses.__all__ if n not in RESULTS)})


def _missing():
    out = []
    for n in NAMES:
        o = getattr(interp, n)
        if inspect.ismodule(o):
            continue
        doc = (o.__doc__ or "").strip()
        if not doc or (inspect.isclass(o) and doc.startswith(f"{o.__name__}(")):
            out.append(n)
        if inspect.isclass(o):
            for k, v in vars(o).items():
                f = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v
                if not k.startswith("_") and callable(f) and not (f.__doc__ or "").strip():
                    out.append(f"{n}.{k}")
    return out


def test_every_public_name_has_a_docstring():
    assert _missing() == []
