"""``python -m interp.organisms {tokenizer,build,eval} ...``"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (like the rest of the CLI), exit code 2."""

    def error(self, message):
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = _Parser(prog="python -m interp.organisms")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    t = sub.add_parser("tokenizer", help="fit the shared tokenizer into data/organisms/tokenizer")
    t.add_argument("--out", default=None)
    b = sub.add_parser("build", help="train an organism")
    b.add_argument("name")
    b.add_argument("--out", default=None, help="output dir (default data/organisms/NAME)")
    b.add_argument("--steps", type=int, default=None, help="truncate the curriculum (smoke tests)")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="override one config field (a variant build), e.g. --set heads=16")
    b.add_argument("--snapshots", action="store_true",
                   help="also save the model at the end of each curriculum phase")
    e = sub.add_parser("eval", help="measure NIAH recall and copy loss; update the card")
    e.add_argument("name", help="organism name or checkpoint directory")
    e.add_argument("--lengths", type=int, nargs="*", default=None)
    e.add_argument("--n-per-cell", type=int, default=20)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    command = "python -m interp.organisms " + " ".join(shlex.quote(a) for a in argv)

    from .train import DATA_DIR, TOKENIZER_DIR

    if args.cmd == "tokenizer":
        from .tokenizer import build_tokenizer, save_tokenizer, write_tokenizer_info

        out = Path(args.out) if args.out else TOKENIZER_DIR
        tok = build_tokenizer()
        save_tokenizer(tok, out)
        write_tokenizer_info(tok, out)
        print(f"tokenizer ({tok.get_vocab_size()} ids) -> {out}")
        return 0
    if args.cmd == "build":
        from .train import config_with, train

        try:
            cfg = config_with(args.name, args.overrides)
        except (KeyError, ValueError) as exc:
            print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
            return 2
        out = Path(args.out) if args.out else DATA_DIR / args.name
        train(cfg, out, steps=args.steps, threads=args.threads, command=command,
              snapshots=args.snapshots)
        print(f"saved -> {out}")
        return 0
    from .evaluate import evaluate

    path = Path(args.name)
    if not path.is_dir():
        path = DATA_DIR / args.name
    if not (path / "config.json").is_file():
        built = sorted(p.name for p in DATA_DIR.iterdir() if (p / "config.json").is_file()) if DATA_DIR.is_dir() else []
        print(f"error: no organism {args.name!r} (no config.json in {path}); built: {', '.join(built) or 'none'}; "
              "build one with `interp organisms build NAME`", file=sys.stderr)
        return 2
    res = evaluate(path, lengths=args.lengths, n_per_cell=args.n_per_cell, threads=args.threads,
                   write=not args.no_write, command=command)
    print(f"NIAH recall {res['niah']['recall']:.3f}; copy gap {res['copy']['gap_nats']:.3f} nats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
