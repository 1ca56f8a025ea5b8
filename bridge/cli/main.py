"""The ``ptxbridge`` command: ``inspect``, ``link``, ``doctor`` and ``cache`` (``docs/cli.md``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ptxbridge import cache
from ptxbridge.abi.errors import FormatError, PtxBridgeError
from ptxbridge.cli.report import printable_lines

__all__ = ["error_text", "main"]

_DESCRIPTION = ("Inspect, link and ship GPU code objects, and check what this machine can build and run. "
                "Run 'ptxbridge COMMAND --help' for each command.")
_CODE_FILES = (".ptx, .cubin, .fatbin, .ltoir, .o or .a files (the format is read from the bytes), .rs "
               "files and Rust crate folders (compiled with Debian rustc), .cu files (compiled with NVRTC)")


def error_text(path: str, exc: PtxBridgeError | OSError) -> str:
    """``FILE: error: what went wrong``, then any compiler or linker log as the tool printed it."""
    if isinstance(exc, FormatError):
        where = f"{exc.source}:{exc.where}" if exc.where is not None else exc.source
        first, rest = exc.reason, ""
    else:
        first, _, rest = str(exc).partition("\n")
        where = path
        if first.startswith(f"{path}: "):
            first = first[len(path) + 2:]
    text = f"{where}: error: {first}\n" + (f"{rest.rstrip()}\n" if rest.strip() else "")
    return printable_lines(text)  # names from files cannot drive the terminal


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ptxbridge.cli.inspect import format_report, inspect_path

    failed = False
    reports, texts = [], []
    for path in args.files:
        try:
            reports.append(inspect_path(path, signatures=args.signatures))
            texts.append(None)
            failed = failed or not reports[-1]["ok"]  # a signature disagrees with the code
        except (PtxBridgeError, OSError) as exc:
            failed = True
            reports.append({"file": path, "error": str(exc)})
            texts.append(error_text(path, exc))
    if args.json:
        json.dump(reports if len(reports) != 1 else reports[0], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for report, text in zip(reports, texts, strict=True):  # unreadable files: stderr; the rest: stdout
            if text is None:
                sys.stdout.write(format_report(report))
            else:
                sys.stderr.write(text)
    return 1 if failed else 0


def _cmd_link(args: argparse.Namespace) -> int:
    from ptxbridge.artifacts.artifact import artifact_from_file
    from ptxbridge.cli.inspect import compile_source, is_source
    from ptxbridge.linker import link
    from ptxbridge.linker.target import portable_target

    targets = args.arch.split(",") if args.arch else []
    try:  # sources compile for the image's PTX target: their PTX links for every listed one
        oldest = portable_target(targets).sm if targets else None
    except PtxBridgeError as exc:
        sys.stderr.write(error_text("ptxbridge link", exc))
        return 1
    artifacts = []
    for name in args.inputs:
        path = Path(name)
        try:
            artifacts.append(compile_source(path, oldest) if is_source(path) else artifact_from_file(path))
        except (PtxBridgeError, OSError) as exc:
            sys.stderr.write(error_text(name, exc))
            return 1
    try:
        image = link(artifacts, arch=targets if len(targets) > 1 else args.arch, lto=args.lto)
        image.save(args.output)
    except PtxBridgeError as exc:
        sys.stderr.write(error_text("ptxbridge link", exc))
        return 1
    print(f"wrote {args.output}: {image!r}")
    return 0


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
        print(f"removed {cache.clear(toolchains=args.all)} entries from {cache.cache_dir()}")
        kept = cache.kept_directories()
        if kept:
            size = sum(f.stat().st_size for d in kept for f in d.rglob("*") if f.is_file())
            names = ", ".join(sorted({d.parent.parent.name for d in kept}))
            print(f"kept the built toolchains ({names}, {size / 1e6:.1f} MB); "
                  "`ptxbridge cache clear --all` removes them too")
    else:
        found = cache.info()
        print(f"{found.path}: {found.entries} entries, {found.bytes / 1e6:.1f} MB")
    return 0


def _version() -> str:
    from ptxbridge import __version__

    return f"ptxbridge {__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptxbridge", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inspect = sub.add_parser(
        "inspect", help="list the kernels, parameter layouts and signatures of code objects",
        description="List every kernel of each file with its parameter layout and, where one is known, its "
                    "signature checked against the code.")
    inspect.add_argument("files", nargs="+", metavar="FILE",
                         help=f"{_CODE_FILES}, host binaries with .oxart sections, or saved ptxbridge images")
    inspect.add_argument("--json", action="store_true", help="print the same as JSON")
    inspect.add_argument("--signatures", metavar="F",
                         help="signature text or JSON manifest file to check the kernels against")
    inspect.set_defaults(run=_cmd_inspect)

    link_cmd = sub.add_parser(
        "link", help="link code objects and sources into one saved image file",
        description="Link the inputs with nvJitLink and save the image (code, signatures, arch and PTX for "
                    "the CPU loader) to one file that Image.open loads on a machine without the toolchains.")
    link_cmd.add_argument("inputs", nargs="+", metavar="INPUT",
                          help=f"{_CODE_FILES}; signatures come from sidecars (k.ptx.sig, k.ptx.json) or the "
                               "source")
    link_cmd.add_argument("-o", "--output", required=True, metavar="FILE",
                          help="the image file to write (conventionally .ptxb)")
    link_cmd.add_argument("--arch", help="the GPU arch to link for, e.g. sm_90, or several: "
                                         "sm_80,sm_90,sm_100 (a cubin for each; default: the first GPU's, "
                                         "else sm_90)")
    link_cmd.add_argument("--lto", action=argparse.BooleanOptionalAction, default=None,
                          help="link-time optimisation (default: on when an input is LTO-IR)")
    link_cmd.set_defaults(run=_cmd_link)

    doctor = sub.add_parser(
        "doctor", help="report the driver, GPUs and toolchains ptxbridge can use",
        description="Report the driver, the GPUs and each toolchain, with the command that installs whatever "
                    "is missing.")
    doctor.add_argument("--json", action="store_true", help="print the same as JSON")
    doctor.set_defaults(run=_cmd_doctor)

    cache_cmd = sub.add_parser("cache", help="show or clear the compile/link cache",
                               description="Show the size of the compile/link cache, or empty it.")
    cache_cmd.add_argument("action", choices=("info", "clear"))
    cache_cmd.add_argument("--all", action="store_true",
                           help="clear: also remove built toolchains (the Rust sysroot, 25 s to rebuild)")
    cache_cmd.set_defaults(run=_cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:  # `ptxbridge doctor --json | head`: the reader left, which is no error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit would raise it again
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
