"""The ``ptc`` command: ``ptc env``, ``ptc demo``, ``ptc fr-trace``."""

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
    from ptc import demo

    if args.list:
        for name, section in demo.SECTIONS.items():
            print(f"{name:12} {section.title}")
        return 0
    demo.run(args.sections)
    return 0


def _fr_trace(args: argparse.Namespace) -> int:
    """Analyze a directory of Flight Recorder dumps: exit 0 when no problem is found, 1 when one is."""
    from ptc.distributed import fr_analysis

    report = fr_analysis.analyze(args.dir, args.prefix)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        if args.entries:
            print(fr_analysis.format_entries(report.dumps))
        print(report.format())
    return 0 if report.ok else 1


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
        "(desync, hang, failure), 2 the dumps could not be read.",
    )
    fr.add_argument("dir", help="directory holding the dumps")
    fr.add_argument("-p", "--prefix", default=None, help="file name prefix before the rank (default: inferred)")
    fr.add_argument("--json", action="store_true", help="machine-readable report")
    fr.add_argument("-j", "--entries", action="store_true", help="also print every rank's recorded calls")
    fr.set_defaults(run=_fr_trace)
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
