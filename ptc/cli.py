"""The ``ptc`` command: ``ptc env``, ``ptc demo``, ``ptc fr-trace``, ``ptc gemm explain``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from ptc.errors import PtcError

__all__ = ["main"]


def _env(args: argparse.Namespace) -> int:
    from ptc._env import format_report, report

    data = report()
    print(json.dumps(data, indent=2) if args.json else format_report(data))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ptc import demos

    if args.list:
        for name, section in demos.SECTIONS.items():
            print(f"{name:12} {section.title}")
        return 0
    demos.run(args.sections)
    return 0


def _fr_trace(args: argparse.Namespace) -> int:
    """Analyze a directory of Flight Recorder dumps: exit 0 when no problem is found, 1 when one is."""
    from ptc.distributed.flight_recorder import analysis as fr_analysis

    report = fr_analysis.analyze(args.dir, args.prefix)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        if args.entries:
            print(fr_analysis.format_entries(report.dumps))
        print(report.format())
    return 0 if report.ok else 1


def _gemm_explain(args: argparse.Namespace) -> int:
    """Print ptc.gemm's plan for one GEMM (and its measurements from a database)."""
    from ptc.gemm import GemmProblem, explain

    if args.signature:
        problem = GemmProblem.from_signature(args.signature)
    else:
        if args.m is None or args.n is None or args.k is None:
            from ptc.errors import PtcValueError

            raise PtcValueError("ptc gemm explain needs -m, -n and -k (or --signature)")
        scale = args.scale
        dtype = args.dtype
        problem = GemmProblem(args.op, args.m, args.n, args.k, args.batch, dtype, dtype, args.out_dtype or
                              ("bf16" if scale else dtype), args.layout, scale)
    print(explain(problem, args.target, args.epilogue, db=args.db, gpu=args.gpu, max_candidates=args.max,
                  show_dropped=None if args.all else 12))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ptc", description="ptc: compiler front-end extensions for torch.compile/export"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    env = sub.add_parser("env", help="print what this install can do")
    env.add_argument("--json", action="store_true", help="machine-readable output")
    env.set_defaults(run=_env)

    demo = sub.add_parser("demo", help="a guided tour of the features")
    demo.add_argument("sections", nargs="*", help="sections to run (default: all)")
    demo.add_argument("--list", action="store_true", help="list the sections and exit")
    demo.set_defaults(run=_demo)

    fr = sub.add_parser(
        "fr-trace",
        help="analyze Flight Recorder dumps: which rank is missing, which collective mismatched",
        description="Analyze a directory of Flight Recorder dumps (ptc's or torch's), one file "
        "<prefix><rank> per rank. Exit status: 0 no problem found, 1 a problem was found "
        "(desync, hang, failure), 2 the dumps could not be read (or DIR is not a directory: "
        "pass the directory, not one rank's file).",
    )
    fr.add_argument("dir", help="directory holding the dumps (the directory, not one rank's file)")
    fr.add_argument("-p", "--prefix", default=None, help="file name prefix before the rank (default: inferred)")
    fr.add_argument("--json", action="store_true", help="machine-readable report")
    fr.add_argument("-j", "--entries", action="store_true", help="also print every rank's recorded calls")
    fr.set_defaults(run=_fr_trace)

    gemm = sub.add_parser("gemm", help="CuTeDSL GEMM planning and autotune reports (ptc.gemm)")
    gsub = gemm.add_subparsers(dest="gemm_command", required=True)
    ex = gsub.add_parser(
        "explain",
        help="the CuTeDSL candidates for a GEMM, why each was dropped, estimates, measured times, winner",
        description="Plan a GEMM for a target GPU (no GPU needed) and show the selected candidate "
        "kernels with the cost model's estimates, the dropped ones with the rule that dropped each "
        "(the first 12, then counts per rule; --all lists every one) and, with --db, the measured "
        "times and the recorded winner.",
    )
    ex.add_argument("--target", default="B200", help="GPU to plan for: H100_SXM, H200_SXM, B200, GB200")
    ex.add_argument("--op", default="mm", choices=["mm", "addmm", "bmm", "scaled_mm"])
    ex.add_argument("-m", type=int)
    ex.add_argument("-n", type=int)
    ex.add_argument("-k", type=int)
    ex.add_argument("--batch", type=int, default=1)
    ex.add_argument("--dtype", default="bf16", help="input dtype: bf16, f16, e4m3, e2m1x2")
    ex.add_argument("--out-dtype", default=None)
    ex.add_argument("--layout", default="tn", help="BLAS letters for A and B (tn: row-major A, B = W.T)")
    ex.add_argument("--scale", default=None, choices=["tensor", "row", "block32", "block16"])
    ex.add_argument("--epilogue", default=None, help="e.g. bias,silu or bias,gelu_tanh,residual")
    ex.add_argument("--signature", default=None, help="a problem signature instead of the options above")
    ex.add_argument("--db", default=None,
                    help="an existing autotune database file (written by ptc.gemm.enable(db=...)): "
                    "adds its measured times and winner")
    ex.add_argument("--gpu", default=None, help="GPU name the measurements were taken on (default: target)")
    ex.add_argument("--max", type=int, default=8, help="candidates to select")
    ex.add_argument("--all", action="store_true",
                    help="list every dropped kernel (default: the first 12, then a count of the rest per rule)")
    ex.set_defaults(run=_gemm_explain)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except PtcError as e:
        print(f"ptc: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
