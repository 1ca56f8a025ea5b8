"""read_oxart / write_oxart on raw blobs and on real gcc-built host objects carrying ``.oxart``."""

import struct

import pytest
from _binary_samples import host_object, host_object_with_c_section, ltoir, oxart_bundles, ptx, ptxas

from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.oxart import (
    EntryKind,
    OxartBundle,
    OxartEntry,
    OxartOptions,
    OxartPayload,
    PayloadKind,
    read_oxart,
    write_oxart,
)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("oxart")


@pytest.fixture(scope="module")
def bundles(work):
    ptx80 = ptx("sm_80")
    return oxart_bundles(ptx80, ptxas(work, ptx80, "sm_80"), ltoir("sm_90"))


@pytest.fixture(scope="module")
def blob(bundles):
    return write_oxart(bundles, tail=40)


def _summary(bundles):
    return [(b.name, b.target, b.options, [(p.kind, p.name, p.data) for p in b.payloads],
             [(e.kind, e.symbol, e.metadata) for e in b.entries]) for b in bundles]


def test_round_trip_of_every_payload_kind_option_and_entry(bundles, blob):
    read = read_oxart(blob, "blob.oxart")
    assert _summary(read) == _summary(bundles)
    assert [b.version for b in read] == [1, 2, 2]  # default options stay on v1, as cuda-oxide writes
    assert {p.kind for b in read for p in b.payloads} == set(PayloadKind)
    assert read[0].entries[2].kind is EntryKind.DEVICE_FUNCTION and read[0].entries[2].flags == 1
    assert read[0].entries[0].metadata is None and read[0].entries[0].flags == 0
    assert read[1].options == OxartOptions(no_fma=True, line_tables=True)
    assert read[2].options.debug and not read[2].options.line_tables
    assert write_oxart(read, tail=40) == blob
    assert read_cubin(read[0].payload(PayloadKind.CUBIN).data).arch == "sm_80"


def test_layout_matches_frontends_md(bundles):
    blob = write_oxart(bundles[1:2])
    magic, version, hlen, total, nlen, tlen, npay, nent, bits = struct.unpack_from("<8sHHIHHHHQ", blob)
    assert (magic, version, hlen, total) == (b"OXIDEART", 2, 32, len(blob))
    assert (nlen, tlen, npay, nent, bits) == (len("lto_crate"), len("sm_90"), 2, 1, 0b011)
    assert blob[32:32 + nlen + tlen] == b"lto_cratesm_90"
    records = 32 + nlen + tlen
    kind, flags, data_off, data_len, name_off, name_len = struct.unpack_from("<HHIIIH", blob, records)
    assert (kind, flags) == (0x0120, 0)
    assert blob[data_off:data_off + data_len] == bundles[1].payloads[0].data
    assert blob[name_off:name_off + name_len] == b"lib.ltoir"
    entry = 32 + nlen + tlen + 2 * 24
    ekind, eflags, metadata, sym_off, sym_len = struct.unpack_from("<HHQIH", blob, entry)
    assert (ekind, eflags, metadata) == (2, 0, 0) and blob[sym_off:sym_off + sym_len] == b"exported_fn"


def test_host_object_from_objcopy(work, bundles, blob):
    obj = host_object(work, {".oxart": blob})
    assert _summary(read_oxart(obj, "app.o")) == _summary(bundles)


def test_host_object_from_gcc_section_attribute(work, bundles):
    small = write_oxart(bundles[1:], tail=8)
    obj = host_object_with_c_section(work, small)
    assert _summary(read_oxart(obj, "ox.o")) == _summary(bundles[1:])


def test_host_object_without_oxart(work):
    with pytest.raises(FormatError, match=r"no \.oxart section"):
        read_oxart(host_object(work, {}, name="bare"), "bare.o")


def _corrupt(blob: bytes, offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(blob)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@pytest.mark.parametrize(("offset", "fmt", "value", "message"), [
    (8, "<H", 3, r"version must be 1 or 2 \(got 3\)"),
    (10, "<H", 40, r"header length must be 32 \(got 40\)"),
    (12, "<I", 1 << 30, "total length must be in"),
    (16, "<H", 0xFFFF, "bundle name .* runs past the bundle end"),
    (20, "<H", 5000, "payload and .* entry records run past"),
    (24, "<Q", 6, "option bits must be"),
    (24, "<Q", 1 << 40, "option bits must be"),
])
def test_bad_header_fields(bundles, offset, fmt, value, message):
    blob = write_oxart([bundles[1]])
    with pytest.raises(FormatError, match=message) as info:
        read_oxart(_corrupt(blob, offset, fmt, value), "bad.oxart")
    assert info.value.source == "bad.oxart" and info.value.where.startswith("offset 0x")


def test_bad_records(bundles):
    blob = write_oxart([bundles[1]])
    records = 32 + len("lto_crate") + len("sm_90")
    with pytest.raises(FormatError, match=r"payload 0 kind must be one of .* \(got 0x999\)"):
        read_oxart(_corrupt(blob, records, "<H", 0x999))
    with pytest.raises(FormatError, match=r"payload 1 data .* runs past"):
        read_oxart(_corrupt(blob, records + 24 + 8, "<I", 1 << 31))
    with pytest.raises(FormatError, match=r"entry 0 kind must be one of .* \(got 0x7\)"):
        read_oxart(_corrupt(blob, records + 48, "<H", 7))
    bad_utf8 = blob.replace(b"exported_fn", b"exported\xff\xfen")
    with pytest.raises(FormatError, match="entry 0 symbol is not UTF-8"):
        read_oxart(bad_utf8)


def test_garbage_after_blobs_and_version_1_ignores_option_bits(bundles):
    blob = write_oxart([bundles[0]])
    with pytest.raises(FormatError, match="must start with magic 'OXIDEART'"):
        read_oxart(blob + bytes(8) + b"junk" * 10)
    (read,) = read_oxart(_corrupt(blob, 24, "<Q", 7))  # v1 carries defaults whatever the bits say
    assert read.version == 1 and read.options == OxartOptions()


def test_writer_validates():
    with pytest.raises(ValueError, match="exclude each other"):
        OxartOptions(line_tables=True, debug=True)
    huge = OxartBundle("n" * 70000, "sm_80", (OxartPayload(PayloadKind.PTX, "p", b"x"),))
    with pytest.raises(ValueError, match=r"name length must fit in 16 bits \(got 70000\)"):
        write_oxart([huge])
    with pytest.raises(ValueError, match="version must be"):
        write_oxart([OxartBundle("n", "sm_80", (), (OxartEntry(EntryKind.KERNEL, "k"),), version=9)])


def test_options_sidecar_texts_are_cuda_oxides_canonical_six():
    # oxide-artifacts ArtifactCompileOptions::sidecar_text: v1 without debug, v2 with it
    texts = {OxartOptions(no_fma, lines, full).sidecar_text()
             for no_fma in (False, True) for lines, full in ((False, False), (True, False), (False, True))}
    assert len(texts) == 6
    assert OxartOptions(no_fma=True).sidecar_text() == "cuda-oxide-compile-options-v1\nfma-contraction=off\n"
    assert OxartOptions(line_tables=True).sidecar_text() == (
        "cuda-oxide-compile-options-v2\nfma-contraction=on\ndebug=line-tables\n")
    for text in texts:
        assert OxartOptions.from_sidecar(text).sidecar_text() == text
    for bad in ("cuda-oxide-compile-options-v1\nfma-contraction=on", "cuda-oxide-compile-options-v1\n"
                "fma-contraction=on\ndebug=full\n", ""):
        with pytest.raises(FormatError, match=r"x.options: compile options must be one of"):
            OxartOptions.from_sidecar(bad, "x.options")
