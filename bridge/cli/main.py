"""The ``ptxbridge`` command: ``inspect``, ``doctor`` and ``cache``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ptxbridge import cache
from ptxbridge.abi.errors import PtxBridgeError

__all__ = ["main"]


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ptxbridge.cli.inspect import format_report, inspect_path

    reports, failed = [], False
    for path in args.files:
        try:
            reports.append(inspect_path(path, signatures=args.signatures))
            failed = failed or not reports[-1]["ok"]  # a signature disagrees with the code
        except (PtxBridgeError, OSError) as exc:
            failed = True
            reports.append({"file": path, "error": str(exc)})
    if args.json:
        json.dump(reports if len(reports) != 1 else reports[0], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for report in reports:  # unreadable files go to stderr, the reports of the others to stdout
            (sys.stderr if "error" in report else sys.stdout).write(format_report(report))
    return 1 if failed else 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from ptxbridge.cli.doctor import run_checks

    checks = run_checks()
    if args.json:
        json.dump([{"name": c.name, "ok": c.ok, "detail": c.detail, "hint": c.hint} for c in checks],
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = "ok " if c.ok else "-- "
        line = f"{mark}{c.name.ljust(width)}  {c.detail}"
        if c.hint:
            line += f"\n{' ' * (width + 5)}-> {c.hint}"
        print(line)
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    if args.action == "clear":
        print(f"removed {cache.clear()} entries from {cache.cache_dir()}")
    else:
        found = cache.info()
        print(f"{found.path}: {found.entries} entries, {found.bytes / 1e6:.1f} MB")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptxbridge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    inspect = sub.add_parser("inspect", help="list kernels, parameter layouts and signatures of code objects")
    inspect.add_argument("files", nargs="+",
                          help=".ptx, .cubin, .fatbin, .ltoir, or a host binary with .oxart sections")
    inspect.add_argument("--json", action="store_true", help="print the same as JSON")
    inspect.add_argument("--signatures",
                         help="signature text or JSON manifest file to check the kernels against")
    inspect.set_defaults(run=_cmd_inspect)

    doctor = sub.add_parser("doctor", help="report the driver, GPUs and toolchains ptxbridge can use")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(run=_cmd_doctor)

    cache_cmd = sub.add_parser("cache", help="show or clear the compile/link cache")
    cache_cmd.add_argument("action", choices=("info", "clear"))
    cache_cmd.set_defaults(run=_cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
