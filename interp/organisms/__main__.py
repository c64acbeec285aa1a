"""``python -m interp.organisms {tokenizer,build,eval,sweep} ...``"""

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


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{v} is below the minimum {minimum}")
        return v
    return parse


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number")
    return v


def _variant(text: str) -> tuple[float, int]:
    theta, sep, seed = text.partition(":")
    try:
        t, s = float(theta), int(seed)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give THETA:SEED, e.g. 10000:4") from None
    if not sep or not (0 < t < float("inf")) or s < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give THETA:SEED with theta > 0 and seed >= 0, e.g. 10000:4")
    return t, s


def _numbers(kind, minimum):
    def parse(text: str) -> list:
        try:
            vals = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {kind.__name__}s") from None
        if not vals or any(not v >= minimum or v != v or v == float("inf") for v in vals):
            raise argparse.ArgumentTypeError(f"{text!r}: give one or more finite values >= {minimum:g}")
        if len(set(vals)) != len(vals):
            raise argparse.ArgumentTypeError(f"{text!r} repeats a value")
        return vals
    return parse


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
    b.add_argument("--recipe", choices=("v1", "v2"), default="v2",
                   help="v2 (the bundled organisms): + random-id repeats and IOI documents, tiny-gpt2 to 1024 tokens; "
                   "v1: the base recipes without them (docs/organisms.md)")
    b.add_argument("--snapshots", action="store_true",
                   help="also save the model at the end of each curriculum phase")
    e = sub.add_parser("eval", help="measure NIAH recall, copy loss (corpus and random ids), IOI and control "
                       "strength; update the card")
    e.add_argument("name", help="organism name or checkpoint directory")
    e.add_argument("--lengths", type=int, nargs="*", default=None)
    e.add_argument("--n-per-cell", type=int, default=20)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--no-write", action="store_true",
                   help="print the numbers only; organism.json and the model cards are left as they are")
    e.add_argument("--ioi-prompts", type=_count(1), default=None, metavar="N",
                   help="IOI prompts (held-out names x held-out templates; default 192)")
    e.add_argument("--control-draws", type=_count(0), default=None, metavar="N",
                   help="layer-matched random control draws for the control-strength check (default 10; 0 skips it)")
    w = sub.add_parser("sweep", help="build rope_theta x seed variants of one organism (missing ones only), measure "
                       "their retrieval heads and write the head-count-vs-theta table and figures (finding ii)")
    w.add_argument("--base", default="tiny-llama", help="the organism whose v2 recipe every variant shares")
    w.add_argument("--thetas", type=_numbers(float, 1e-9), default="1000,10000,500000", metavar="T,T,...",
                   help="rope_theta values (at least two)")
    w.add_argument("--seeds", type=_numbers(int, 0), default="2,3", metavar="S,S,...", help="training seeds")
    w.add_argument("--add", type=_variant, action="append", default=[], metavar="THETA:SEED",
                   help="one more variant beyond the grid (repeatable), e.g. --add 10000:4 when a seed did not retrieve")
    w.add_argument("--builds", default=None, help="where variant builds are found and made "
                   "(default data/organisms/theta; the variant equal to a bundled organism is that organism)")
    w.add_argument("--out", default="runs/theta", help="the analysis folder (theta.json, table.md, "
                   "builds.csv, figures; measures/ caches each build's measures)")
    w.add_argument("--parallel", type=_count(1), default=2, help="builds at a time, one thread each")
    w.add_argument("--no-build", action="store_true", help="measure the builds there are; a missing one is an error")
    w.add_argument("--lengths", type=_numbers(int, 16), default="512,1024", metavar="N,N",
                   help="NIAH context lengths of the detection")
    w.add_argument("--n-seeds", type=_count(1), default=8, help="NIAH seeds of the detection")
    w.add_argument("--threshold", type=_finite, default=0.1, help="retrieval score above which a head counts")
    w.add_argument("--n-boot", type=_count(1), default=2000, help="bootstrap resamples (seeds, then NIAH seeds)")
    w.add_argument("--threads", type=_count(1), default=1, help="torch threads while measuring")
    args = ap.parse_args(argv)
    command = "python -m interp.organisms " + " ".join(shlex.quote(a) for a in argv)

    from interp.organisms.train import DATA_DIR, TOKENIZER_DIR

    if args.cmd == "tokenizer":
        from interp.organisms.tokenizer import build_tokenizer, save_tokenizer, write_tokenizer_info

        out = Path(args.out) if args.out else TOKENIZER_DIR
        tok = build_tokenizer()
        save_tokenizer(tok, out)
        write_tokenizer_info(tok, out)
        print(f"tokenizer ({tok.get_vocab_size()} ids) -> {out}")
        return 0
    if args.cmd == "sweep":
        from interp.organisms.sweep_cmd import run_sweep

        return run_sweep(args, argv[1:])
    if args.cmd == "build":
        from interp.organisms.train import config_with, train

        try:
            cfg = config_with(args.name, args.overrides, args.recipe)
        except (KeyError, ValueError) as exc:
            print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
            return 2
        out = Path(args.out) if args.out else DATA_DIR / args.name
        train(cfg, out, steps=args.steps, threads=args.threads, command=command,
              snapshots=args.snapshots)
        print(f"saved -> {out}")
        return 0
    from interp.organisms.evaluate import evaluate

    path = Path(args.name)
    if not path.is_dir():
        path = DATA_DIR / args.name
    if not (path / "config.json").is_file():
        built = sorted(p.name for p in DATA_DIR.iterdir() if (p / "config.json").is_file()) if DATA_DIR.is_dir() else []
        print(f"error: no organism {args.name!r} (no config.json in {path}); built: {', '.join(built) or 'none'}; "
              "build one with `interp organisms build NAME`", file=sys.stderr)
        return 2
    from interp.organisms.evaluate import CONTROL_DRAWS, IOI_PROMPTS

    res = evaluate(path, lengths=args.lengths, n_per_cell=args.n_per_cell, threads=args.threads,
                   write=not args.no_write, command=command,
                   ioi_prompts=IOI_PROMPTS if args.ioi_prompts is None else args.ioi_prompts,
                   control_draws=CONTROL_DRAWS if args.control_draws is None else args.control_draws)
    rid, ioi = res["random_id_copy"], res["ioi"]
    print(f"NIAH recall {res['niah']['recall']:.3f}; copy gap {res['copy']['gap_nats']:.3f} nats; random-id copy "
          f"first {rid['first_copy_loss']:.2f} / second {rid['second_copy_loss']:.2f} / gap {rid['gap_nats']:.2f} nats "
          f"(uniform {rid['uniform_loss']:.2f}); IOI logit diff {ioi['logit_diff']['mean']:+.2f}, accuracy "
          f"{ioi['accuracy']:.2f}" + (f"; control sets >= {res['controls']['min_rel']}x median: "
                                      f"{res['controls']['strong_sets']} of {res['controls']['distinct_sets']} distinct"
                                      if "controls" in res else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
