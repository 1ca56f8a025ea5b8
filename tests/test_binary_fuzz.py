"""Mutated real cubins, fatbins, .oxart data, static libraries and LTO-IR headers: every reader
returns or raises FormatError, nothing else.

Mutations: byte flips, truncation (also every cut of real nvJitLink and NVRTC cubins near their
program and section header tables), and header fields (ELF, section headers,
nv.info records, fatbin, .oxart and ar member headers) overwritten with extreme values, and the
decimal fields of ar member headers with other numbers.
A crash (IndexError, struct.error, MemoryError...) fails the test, and so does an input that
takes more than about 1 s of CPU time or 10x its size in memory (``_budget``: CPU time, not wall
time, so a loaded machine does not fail it).
"""

import struct

import pytest
from _binary_samples import (
    CUDA_SOURCE,
    archive,
    fatbinary,
    host_object,
    ltoir,
    nvcc_object,
    nvjitlink_cubin,
    oxart_bundles,
    ptx,
    ptxas,
)
from _budget import run_within_budget
from _toolchain import nvrtc_compile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxbridge.abi.archive import read_archive
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.elf import read_elf
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.fatbin import read_fatbin
from ptxbridge.abi.ltoir import read_ltoir_target
from ptxbridge.abi.oxart import read_oxart, write_oxart
from ptxbridge.abi.sniff import sniff

LARGE_PARAMS_PTX = b""".version 8.8
.target sm_90
.address_size 64
.visible .entry big(.param .u64 .ptr .global .align 16 g, .param .align 8 .b8 agg[5000], .param .u32 n)
{ ret; }
"""
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXTREMES = [0, 1, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 63, (1 << 64) - 1]


def _elf_fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, width) of the ELF header, every section header field and every nv.info record head."""
    elf = read_elf(data)
    fields = [(0x10, 2), (0x12, 2), (0x28, 8), (0x30, 4), (0x34, 2), (0x3A, 2), (0x3C, 2), (0x3E, 2)]
    for s in elf.sections:
        base = elf.header.shoff + 64 * s.index
        fields += [(base, 4), (base + 4, 4), (base + 0x18, 8), (base + 0x20, 8), (base + 0x28, 4),
                   (base + 0x2C, 4), (base + 0x38, 8)]
        if s.name.startswith(".nv.info") or s.name == ".nv.compat":
            fields += [(s.offset + i, 4) for i in range(0, s.size, 4)]
    return fields


def _ar_headers(data: bytes) -> list[int]:
    """Offsets of every member header of a well-formed archive (the symbol index and // too)."""
    heads, pos = [], 8
    while pos < len(data):
        heads.append(pos)
        size = int(data[pos + 48 : pos + 58])
        pos += 60 + size + (size & 1)
    return heads


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    text = ptx("sm_90")
    cubin = ptxas(work, text, "sm_90")
    fat = fatbinary(work, [("elf", "90", cubin), ("ptx", "90", text)], "--compress=false", name="plain")
    lz4 = fatbinary(work, [("elf", "90", cubin)], "--compress-all", "--compress-mode=speed", name="lz4")
    blob = write_oxart(oxart_bundles(text, cubin, ltoir("sm_90")), tail=16)
    elf_oxart = host_object(work, {".oxart": blob})
    large = ptxas(work, LARGE_PARAMS_PTX, "sm_90", name="large")  # EIATTR_KPARAM_INFO_V2 records
    lto = nvcc_object(work, 'extern "C" __global__ void k(int* p) { *p = 1; }\n', "-gencode",
                      "arch=compute_90,code=lto_90")
    library = archive(work, {"k.o": lto, "a_member_name_longer_than_fifteen_bytes.o": lto, "odd": b"odd"})
    return {
        "cubin": (cubin, _elf_fields(cubin)),
        "cubin_v2": (large, _elf_fields(large)),
        "fatbin": (fat, [(0, 4), (4, 2), (6, 2), (8, 8)]
                   + [(16 + o, w) for o, w in [(0, 2), (4, 4), (8, 8), (16, 4), (28, 4), (40, 8), (56, 8)]]),
        "lz4": (lz4, [(16 + o, w) for o, w in [(4, 4), (8, 8), (16, 4), (40, 8), (56, 8)]]
                + [(80 + i, 1) for i in range(0, 64)]),
        "oxart": (blob, [(o, w) for o, w in [(8, 2), (10, 2), (12, 4), (16, 2), (18, 2), (20, 2), (22, 2),
                                             (24, 8)]] + [(60 + i, 4) for i in range(0, 200, 4)]),
        "elf_oxart": (elf_oxart, _elf_fields(elf_oxart)),
        "archive": (library, [(h + i, 1) for h in _ar_headers(library) for i in range(60)]),
        "ltoir": (ltoir("sm_90"), [(o, 2) for o in range(0, 48, 2)] + [(o, 4) for o in range(0, 48, 4)]),
    }


def _mutate(data: bytes, fields: list[tuple[int, int]], draw) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        offset, width = draw(st.sampled_from(fields))
        value = draw(st.sampled_from(EXTREMES) | st.integers(0, (1 << (8 * width)) - 1))
        if offset + width <= len(out):
            struct.pack_into(f"<{ {1: 'B', 2: 'H', 4: 'I', 8: 'Q'}[width] }", out, offset,
                             value & ((1 << (8 * width)) - 1))
    for _ in range(draw(st.integers(0, 4))):
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        del out[draw(st.integers(0, len(out))):]
    return bytes(out)


def _survives(reader, data: bytes) -> None:
    try:
        run_within_budget(lambda: reader(data, "fuzz.bin"), len(data), reader.__name__)
    except FormatError as exc:
        assert exc.source == "fuzz.bin"


@FUZZ
@given(st.data())
def test_cubin_reader(corpus, data):
    _survives(read_cubin, _mutate(*corpus["cubin"], data.draw))


@FUZZ
@given(st.data())
def test_cubin_reader_with_kparam_info_v2(corpus, data):
    _survives(read_cubin, _mutate(*corpus["cubin_v2"], data.draw))


@FUZZ
@given(st.data())
def test_fatbin_reader(corpus, data):
    _survives(read_fatbin, _mutate(*corpus["fatbin"], data.draw))


@FUZZ
@given(st.data())
def test_fatbin_reader_lz4(corpus, data):
    _survives(read_fatbin, _mutate(*corpus["lz4"], data.draw))


@FUZZ
@given(st.data())
def test_ltoir_target_reader(corpus, data):
    _survives(read_ltoir_target, _mutate(*corpus["ltoir"], data.draw))


@FUZZ
@given(st.data())
def test_oxart_reader(corpus, data):
    _survives(read_oxart, _mutate(*corpus["oxart"], data.draw))


@FUZZ
@given(st.data())
def test_oxart_reader_in_host_elf(corpus, data):
    _survives(read_oxart, _mutate(*corpus["elf_oxart"], data.draw))


@FUZZ
@given(st.data())
def test_archive_reader(corpus, data):
    library, fields = corpus["archive"]
    out = bytearray(_mutate(library, fields, data.draw))
    for _ in range(data.draw(st.integers(0, 2))):  # a size, "/N" or "#1/N" with other digits
        at = data.draw(st.sampled_from([h + d for h in _ar_headers(library) for d in (1, 3, 48)]))
        digits = str(data.draw(st.sampled_from(EXTREMES) | st.integers(0, 99999))).encode()[:10]
        if at + len(digits) <= len(out):
            out[at : at + len(digits)] = digits
    _survives(read_archive, bytes(out))


@FUZZ
@given(st.sampled_from(["cubin", "fatbin", "oxart", "elf_oxart"]), st.data())
def test_sniff(corpus, name, data):
    _survives(sniff, _mutate(*corpus[name], data.draw))


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(blob):
    for reader in (read_cubin, read_fatbin, read_oxart, sniff):
        _survives(reader, blob)



@pytest.fixture(scope="module", params=["nvjitlink", "nvrtc"])
def linked_cubin(request) -> bytes:
    """A whole cubin as nvJitLink links it and NVRTC compiles it (program headers last)."""
    if request.param == "nvjitlink":
        return nvjitlink_cubin(ptx("sm_90"), "sm_90")
    return nvrtc_compile(CUDA_SOURCE, ["-arch=sm_90", "-std=c++17"], output="cubin")


def _table_span(data: bytes, offset_field: int, count_field: int, entsize: int) -> tuple[int, int]:
    (offset,) = struct.unpack_from("<Q", data, offset_field)
    (count,) = struct.unpack_from("<H", data, count_field)
    return offset, offset + count * entsize


def test_truncated_cubins_are_refused(linked_cubin):
    """Every cut of a real cubin raises FormatError; one inside the program or section header table
    names that table and its offsets.  (Cuts through the program headers used to read as whole.)"""
    data = linked_cubin
    read_cubin(data, "whole.cubin")
    tables = {"program header table": _table_span(data, 0x20, 0x38, 56),
              "section header table": _table_span(data, 0x28, 0x3C, 64)}
    assert all(start < end for start, end in tables.values())
    cuts = set(range(0, len(data), 97))
    for start, end in tables.values():
        cuts |= set(range(start, end))
    for cut in sorted(cuts):
        with pytest.raises(FormatError) as caught:
            run_within_budget(lambda: read_cubin(data[:cut], "cut.cubin"), cut, "read_cubin")  # noqa: B023
        assert caught.value.source == "cut.cubin"
        for name, (start, end) in tables.items():
            if start < cut < end:
                assert f"{name} [{start:#x}, {end:#x})" in str(caught.value)
                assert f"runs past the end of the file (size {cut:#x})" in str(caught.value)


def _with_section(data: bytes, name: str, blob: bytes) -> bytes:
    """``data`` with section ``name`` pointed at ``blob``, appended to the file."""
    elf = read_elf(data)
    header = elf.header.shoff + 64 * elf.section(name).index
    out = bytearray(data) + blob
    struct.pack_into("<QQ", out, header + 0x18, len(data), len(blob))
    return bytes(out)


def _kparam(ordinal: int) -> bytes:
    """An EIATTR_KPARAM_INFO record: a 1-byte parameter at byte ``ordinal``."""
    return struct.pack("<BBHIHHI", 4, 0x17, 12, 0, ordinal, ordinal, 1 << 18)


@pytest.mark.parametrize("section, blob", [
    (".nv.info.saxpy", struct.pack("<BBH", 1, 0x01, 0) * (1 << 16)),  # 4-byte records nobody reads
    (".nv.info.saxpy", b"".join(_kparam(k) for k in range(1 << 14))),  # 16 Ki 1-byte parameters
    (".nv.info", b"".join(struct.pack("<BBHII", 4, 0x2F, 8, k, 5) for k in range(1 << 16))),  # REGCOUNTs
], ids=["nval", "kparams", "per-symbol"])
def test_crafted_nv_info_stays_within_memory_budget(corpus, section, blob):
    """A cubin whose .nv.info section holds 16-64 Ki records reads within 10x its size (each record
    held as an object took about 20x).  The input must be large enough for the fixed 2 MiB
    allowance not to hide that; tracing every allocation slows the reader about 7x, hence the
    larger CPU budget here (it still catches a hang)."""
    data = _with_section(corpus["cubin"][0], section, blob)
    cubin = run_within_budget(lambda: read_cubin(data, "crafted.cubin"), len(data), "read_cubin", seconds=5)
    assert cubin.kernel("saxpy").registers is not None
