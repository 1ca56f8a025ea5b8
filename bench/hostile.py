"""Reliability on hostile input: mutated artifacts through every reader, and a cache under attack.

    python bench/hostile.py [--cases 2000] [--seed 1] [--processes 8]

Readers: each case is a real artifact (NVRTC PTX, ptxas cubin, fatbinary fatbins plain / LZ4 /
zstd / encoded LTO-IR, .oxart blobs and host objects, an ``ar`` static library of nvcc LTO-IR
objects, JSON manifests, raw NVRTC LTO-IR, a saved image with cubins for three targets) with 1-6
random mutations (byte flips, extreme header fields, inserted tokens, truncation), read under the
per-input budget of the fuzz tests (1 s of CPU time, 10x the input's size in memory plus 2 MiB).
A case *fails*
when the reader raises anything but its documented ptxbridge error, or exceeds the budget.

Cache: processes racing on one key (every read must be a whole entry of one writer), entries
copied over other keys' entries and damaged entries (each must be refused, never returned).

Prints Markdown tables for docs/trust.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from _binary_samples import (  # noqa: E402
    archive,
    fatbinary,
    host_object,
    ltoir,
    nvcc_object,
    oxart_bundles,
    ptx,
    ptxas,
)
from _budget import BudgetExceeded, run_within_budget  # noqa: E402

from ptxbridge.abi.archive import read_archive  # noqa: E402
from ptxbridge.abi.cubin import read_cubin  # noqa: E402
from ptxbridge.abi.errors import FormatError, PtxBridgeError  # noqa: E402
from ptxbridge.abi.fatbin import read_fatbin  # noqa: E402
from ptxbridge.abi.image_file import read_image_file  # noqa: E402
from ptxbridge.abi.ltoir import read_ltoir_target  # noqa: E402
from ptxbridge.abi.manifest import dumps, loads  # noqa: E402
from ptxbridge.abi.oxart import read_oxart, write_oxart  # noqa: E402
from ptxbridge.abi.ptx import read_ptx  # noqa: E402
from ptxbridge.abi.sniff import sniff  # noqa: E402
from ptxbridge.abi.syntax import parse_signatures  # noqa: E402
from ptxbridge.artifacts.artifact import artifact_from_bytes  # noqa: E402
from ptxbridge.linker import link  # noqa: E402

EXTREMES = [0, 1, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 63, (1 << 64) - 1]
TOKENS = [b"{", b"}", b"(", b")", b"[", b"]", b";", b",", b"/*", b"*/", b"//", b'"', b"\n", b".entry",
          b".func", b".param", b".u64", b".b8", b".align 3", b".reqntid 0", b"99999999999999999999999",
          b"\xff", b"\\u001b", b"null", b"-1", b"1e999", b"[[[[", b'"kind": "tile_list"']
SIGNATURES = parse_signatures("#[convention(c)] kernel saxpy(a: f32, x: *const f32, y: *mut f32, n: i32)\n"
                              "#[convention(numba)] kernel k(a: Array<f32, 2, C>, t: TileArray<f32, 1>)")


def corpus(work: Path) -> dict[str, bytes]:
    text = ptx("sm_90")
    cubin = ptxas(work, text, "sm_90")
    lto = ltoir("sm_90")
    blob = write_oxart(oxart_bundles(text, cubin, lto), tail=16)
    lto_object = nvcc_object(work, 'extern "C" __global__ void k(int* p) { *p = 1; }\n', "-gencode",
                             "arch=compute_90,code=lto_90")
    return {
        "ptx": text, "cubin": cubin,
        "fatbin": fatbinary(work, [("elf", "90", cubin), ("ptx", "90", text)], "--compress=false", name="p"),
        "fatbin-lz4": fatbinary(work, [("elf", "90", cubin)], "--compress-all", "--compress-mode=speed",
                                name="l"),
        "fatbin-zstd": fatbinary(work, [("elf", "90", cubin), ("ptx", "90", text)], "--compress-all",
                                 name="z"),
        "fatbin-ltoir": fatbinary(work, [("nvvm", "90", lto)], name="n"),
        "oxart": blob, "host-elf-oxart": host_object(work, {".oxart": blob}),
        "archive": archive(work, {"k.o": lto_object,
                                  "a_member_name_longer_than_fifteen_bytes.o": lto_object}),
        "manifest": dumps(SIGNATURES).encode(),
        "ltoir": lto,
        "image": link([artifact_from_bytes(text, name="k.ptx")],
                      arch=["sm_90", "sm_100", "sm_120"]).to_bytes(),
    }


def mutate(rng: random.Random, data: bytes, textual: bool) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(out) + 1)
        how = rng.choice(["flip", "field", "token", "delete", "truncate"])
        if how == "flip" and at < len(out):
            out[at] = rng.randrange(256)
        elif how == "field" and at + 8 <= len(out):
            width = rng.choice([1, 2, 4, 8])
            value = rng.choice(EXTREMES) & ((1 << (8 * width)) - 1)
            struct.pack_into(f"<{ {1: 'B', 2: 'H', 4: 'I', 8: 'Q'}[width] }", out, at, value)
        elif how == "token" and textual:
            out[at:at] = rng.choice(TOKENS)
        elif how == "delete":
            del out[at:at + rng.randint(1, 64)]
        elif how == "truncate":
            del out[at:]
    return bytes(out)


JSON_VALUES = [None, True, 1.0, -1, 2**64, "<5000 digits>", "", "x" * 1000, [], {}, [[[[[]]]]],
               {"kind": "scalar"}, {"kind": "tile_list", "element": {"kind": "scalar", "dtype": "f32"}}]


def mutate_json(rng: random.Random, data: bytes) -> bytes:
    """Replace, drop or duplicate a random node of a JSON document (the text stays JSON)."""
    doc = json.loads(data)
    for _ in range(rng.randint(1, 4)):
        nodes, stack = [], [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, (dict, list)):
                keys = list(node) if isinstance(node, dict) else range(len(node))
                nodes += [(node, k) for k in keys]
                stack += [node[k] for k in keys]
        if not nodes:  # everything was dropped already
            break
        parent, k = rng.choice(nodes)
        how = rng.random()
        if how < 0.6:
            parent[k] = copy.deepcopy(rng.choice(JSON_VALUES))
        elif how < 0.8 and isinstance(parent, dict):
            del parent[k]
        elif isinstance(parent, list):
            parent.extend(parent[:1] * rng.randint(1, 3))
    return json.dumps(doc).replace('"<5000 digits>"', "9" * 5000).encode()


READERS: dict[str, tuple[Callable[[bytes], object], tuple[type[Exception], ...]]] = {
    "ptx": (lambda d: read_ptx(d, "fuzz"), (FormatError,)),
    "cubin": (lambda d: read_cubin(d, "fuzz"), (FormatError,)),
    "fatbin": (lambda d: read_fatbin(d, "fuzz"), (FormatError,)),
    "oxart": (lambda d: read_oxart(d, "fuzz"), (FormatError,)),
    "archive": (lambda d: read_archive(d, "fuzz"), (FormatError,)),
    "manifest": (lambda d: loads(d, source="fuzz"), (FormatError,)),
    "sniff": (lambda d: sniff(d, "fuzz"), (FormatError,)),
    "ltoir": (lambda d: read_ltoir_target(d, "fuzz"), (FormatError,)),
    "image": (lambda d: read_image_file(d, "fuzz"), (FormatError,)),
    # sniff, the reader, and the signatures checked against the code, as Artifact.from_file does
    "artifact": (lambda d: artifact_from_bytes(d, (), source="fuzz"), (PtxBridgeError,)),
}
READS = {"ptx": ["ptx", "sniff", "artifact"], "cubin": ["cubin", "sniff", "artifact"],
         "fatbin": ["fatbin", "sniff", "artifact"], "fatbin-lz4": ["fatbin", "artifact"],
         "fatbin-zstd": ["fatbin", "artifact"], "fatbin-ltoir": ["fatbin", "artifact"],
         "oxart": ["oxart", "sniff"], "host-elf-oxart": ["oxart", "sniff"], "manifest": ["manifest"],
         "archive": ["archive", "sniff", "artifact"], "ltoir": ["ltoir", "sniff", "artifact"],
         "image": ["image"]}


def fuzz(samples: dict[str, bytes], cases: int, seed: int) -> tuple[Counter, list[str]]:
    rng = random.Random(seed)
    counts: Counter = Counter()
    failures: list[str] = []
    for name, data in samples.items():
        for _ in range(cases):
            structured = name == "manifest" and rng.random() < 0.5
            case = mutate_json(rng, data) if structured else mutate(rng, data, name in ("ptx", "manifest"))
            for reader in READS[name]:
                call, expected = READERS[reader]
                counts[name, reader, "cases"] += 1
                try:
                    run_within_budget(lambda: call(case), len(case), reader)  # noqa: B023
                    counts[name, reader, "accepted"] += 1
                except BudgetExceeded as exc:
                    counts[name, reader, "failed"] += 1
                    failures.append(f"{name}/{reader}: {exc}")
                except expected:
                    counts[name, reader, "rejected"] += 1
                except Exception as exc:  # the one outcome a reader must never have
                    counts[name, reader, "failed"] += 1
                    failures.append(f"{name}/{reader}: {type(exc).__name__}: {exc}"[:300])
    return counts, failures


def _racer(directory: str, index: int, rounds: int, queue) -> None:
    os.environ["PTXBRIDGE_CACHE_DIR"] = directory
    from ptxbridge import cache

    k = cache.key("race")
    bad = 0
    for i in range(rounds):
        cache.put("race", k, bytes([index]) * (4096 + i))
        found = cache.get("race", k)
        bad += found is not None and not (len(set(found)) == 1 and len(found) >= 4096)
    queue.put(bad)


def cache_attacks(processes: int, rounds: int, seed: int) -> dict[str, tuple[int, int]]:
    """(cases, wrong results) per attack."""
    from ptxbridge import cache

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PTXBRIDGE_CACHE_DIR"] = tmp
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(tmp, i, rounds, queue)) for i in range(processes)]
        for p in procs:
            p.start()
        bad = sum(queue.get() for _ in procs)
        for p in procs:
            p.join()
        results[f"{processes} processes racing on one key"] = (processes * rounds, bad)
        rng = random.Random(seed)
        keys = [cache.key(str(i)) for i in range(200)]
        for i, k in enumerate(keys):
            cache.put("unit", k, f"payload {i}".encode() * 50)
        path = {k: Path(tmp) / "unit" / k[:2] / k for k in keys}
        planted = 0
        for _ in range(200):
            a, b = rng.sample(keys, 2)
            path[b].write_bytes(path[a].read_bytes())
            planted += cache.get("unit", b) is not None
            cache.put("unit", b, f"payload {keys.index(b)}".encode() * 50)
        results["an entry copied over another key's entry"] = (200, planted)
        damaged = 0
        for _ in range(1000):
            k = rng.choice(keys)
            blob = bytearray(path[k].read_bytes())
            if rng.random() < 0.5:
                del blob[rng.randrange(len(blob)):]
            else:
                blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
            path[k].write_bytes(bytes(blob))
            damaged += cache.get("unit", k) is not None
            cache.put("unit", k, f"payload {keys.index(k)}".encode() * 50)
        results["a truncated or bit-flipped entry"] = (1000, damaged)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="mutated cases per artifact")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--processes", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        samples = corpus(Path(work))
    started = time.perf_counter()
    counts, failures = fuzz(samples, args.cases, args.seed)
    took = time.perf_counter() - started
    print("| artifact | reader | cases | accepted | rejected (ptxbridge error) | failed |")
    print("|---|---|---|---|---|---|")
    for name in samples:
        for reader in READS[name]:
            c = [counts[name, reader, key] for key in ("cases", "accepted", "rejected", "failed")]
            print(f"| {name} | {reader} | {' | '.join(map(str, c))} |")
    total = sum(v for (_, _, key), v in counts.items() if key == "cases")
    failed = sum(v for (_, _, key), v in counts.items() if key == "failed")
    print(f"\n{total} reads in {took:.0f} s, {failed} failures")
    for failure in failures[:20]:
        print(f"- {failure}")
    print("\n| cache attack | cases | wrong results |\n|---|---|---|")
    for attack, (cases, bad) in cache_attacks(args.processes, 50, args.seed).items():
        print(f"| {attack} | {cases} | {bad} |")
    print(json.dumps({"reads": total, "failures": failed}))


if __name__ == "__main__":
    main()
