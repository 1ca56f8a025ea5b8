"""read_fatbin on containers made by ``fatbinary`` (plain, LZ4, zstd) and on a host ELF's ``.nv_fatbin``;
decompression bombs (LZ4 expansion, zstd declared sizes, many images) and their limits."""

import re
import struct

import pytest
import zstandard
from _binary_samples import fatbinary, host_object, ltoir, ptx, ptxas
from _budget import growth, run_within_budget

import ptxbridge
from ptxbridge.abi import fatbin
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.fatbin import FLAG_LZ4, FLAG_ZSTD, lz4_block_decompress, read_fatbin
from ptxbridge.abi.syntax import parse_signatures
from ptxbridge.artifacts.artifact import artifact_from_bytes
from ptxbridge.cli import main


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    work = tmp_path_factory.mktemp("fatbin")
    ptx90, ptx80 = ptx("sm_90"), ptx("sm_80")
    return {
        "work": work,
        "ptx90": ptx90,
        "cubin90": ptxas(work, ptx90, "sm_90"),
        "cubin80": ptxas(work, ptx80, "sm_80"),
        "cubin90a": ptxas(work, ptx("sm_90a"), "sm_90a"),
        "ltoir": ltoir("sm_90"),
    }


def test_lists_cubins_ptx_and_ltoir_per_arch(images):
    work = images["work"]
    data = fatbinary(work, [("elf", "90", images["cubin90"]), ("ptx", "90", images["ptx90"]),
                            ("elf", "80", images["cubin80"]), ("nvvm", "90", images["ltoir"])],
                     "--compress=false")
    fat = read_fatbin(data, "x.fatbin")
    assert [(e.kind, e.arch) for e in fat.entries] == [("elf", "sm_90"), ("ptx", "sm_90"), ("elf", "sm_80"),
                                                       ("ltoir", "sm_90")]
    assert all(not e.compressed and e.decompressed for e in fat.entries)
    cubin90, cubin80 = fat.cubins()
    assert cubin90.data.startswith(images["cubin90"]) and len(cubin90.data) - len(images["cubin90"]) < 8
    assert read_cubin(cubin80.data).arch == "sm_80"
    assert cubin90.format_version == (1, 8)  # ELF ABI 1.8
    (ptx_image,) = fat.ptx()

    def code(text: str) -> list[str]:  # fatbinary drops comments and squeezes whitespace
        return re.sub(r"//[^\n]*", "", text).split()

    assert code(ptx_image.text()) == code(images["ptx90"].decode())
    assert ptx_image.format_version == (9, 5)  # the PTX ISA version NVRTC 13.5 writes
    assert fat.entries[3].data.startswith(images["ltoir"])


def test_arch_specific_images(images):
    data = fatbinary(images["work"], [("elf", "90a", images["cubin90a"])], name="a")
    (entry,) = read_fatbin(data).entries
    assert entry.arch == "sm_90a" and entry.sm == 90
    assert read_cubin(entry.data).arch == "sm_90a"


@pytest.mark.parametrize(("mode", "compression"), [("speed", "lz4"), ("default", "zstd"), ("none", None)])
def test_compressed_images(images, mode, compression):
    data = fatbinary(images["work"], [("elf", "90", images["cubin90"])], "--compress-all",
                     f"--compress-mode={mode}", name=f"c_{mode}")
    (entry,) = read_fatbin(data).entries
    assert entry.compression == compression
    if compression == "zstd" and not entry.decompressed:  # stdlib zstd arrives with Python 3.14
        assert entry.data[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame, reported as such
        with pytest.raises(ValueError, match="not readable PTX"):
            entry.text()
        return
    assert entry.decompressed
    assert entry.data[: len(images["cubin90"])] == images["cubin90"]
    assert read_cubin(entry.data).kernel("saxpy").params


def test_fatbin_inside_a_host_elf(images):
    work = images["work"]
    fat = fatbinary(work, [("elf", "90", images["cubin90"]), ("elf", "80", images["cubin80"])], name="h")
    obj = host_object(work, {".nv_fatbin": fat + bytes(8) + fat})  # two aligned containers
    entries = read_fatbin(obj, "host.o").entries
    assert [e.arch for e in entries] == ["sm_90", "sm_80", "sm_90", "sm_80"]
    assert entries[0].offset > len(obj) - len(fat) * 2 - 1024  # offsets are file offsets
    with pytest.raises(FormatError, match="no fatbin section"):
        read_fatbin(host_object(work, {}, name="plain"), "plain.o")


def test_lz4_block_format():
    # literal "abc", then a 9-byte match at distance 3 (overlapping copy), then the final literal "!"
    block = bytes([0x35]) + b"abc" + struct.pack("<H", 3) + bytes([0x10]) + b"!"
    assert lz4_block_decompress(block, 13) == b"abcabcabcabc!"
    with pytest.raises(FormatError, match="decodes to 13 bytes"):
        lz4_block_decompress(block, 20)
    with pytest.raises(FormatError, match="outside the output"):
        lz4_block_decompress(bytes([0x15]) + b"a" + struct.pack("<H", 5) + bytes([0x10]) + b"!", 10)


def test_bad_magic_and_overrunning_sizes(images):
    data = fatbinary(images["work"], [("elf", "90", images["cubin90"])], name="m")
    with pytest.raises(FormatError, match=r"magic must be 0xBA55ED50 \(got 0x12345678\)"):
        read_fatbin(struct.pack("<I", 0x12345678) + data[4:], "bad.fatbin")
    huge_body = data[:8] + struct.pack("<Q", 1 << 40) + data[16:]
    with pytest.raises(FormatError, match="runs past the input end") as info:
        read_fatbin(huge_body, "big.fatbin")
    assert info.value.where == "offset 0x0"
    huge_payload = data[:24] + struct.pack("<Q", 1 << 40) + data[32:]
    with pytest.raises(FormatError, match="runs past its container"):
        read_fatbin(huge_payload)


@pytest.mark.parametrize(("mode", "compression"), [("default", "zstd"), ("speed", "lz4")])
def test_lto_ir_images_that_fatbinary_compresses_are_read_and_linked(images, mode, compression, capsys):
    """``fatbinary kind=nvvm`` encodes compressed LTO-IR (flag 0x10000): no zstd frame, no LZ4 block.
    The reader lists the image without decoding it; nvJitLink links the fatbin as it is."""
    data = fatbinary(images["work"], [("nvvm", "90", images["ltoir"])], f"--compress-mode={mode}",
                     name=f"lto_{mode}")
    (entry,) = read_fatbin(data, "lto.fatbin").entries
    assert (entry.kind, entry.arch, entry.compression, entry.decompressed) == ("ltoir", "sm_90", compression,
                                                                              False)
    assert entry.encoded and entry.data[:4] not in (b"\x28\xb5\x2f\xfd", images["ltoir"][:4])
    signature = parse_signatures("kernel saxpy(a: f32, x: *const f32, y: *mut f32, n: i32)")
    artifact = artifact_from_bytes(data, signature, source="lto.fatbin")
    image = ptxbridge.link([artifact], arch="sm_90", lto=True)
    assert "saxpy" in {k.name for k in read_cubin(image.cubin).kernels}
    path = images["work"] / f"lto_{mode}.fatbin"
    path.write_bytes(data)
    assert main(["inspect", str(path)]) == 0
    assert "compressed LTO-IR that only nvJitLink reads" in capsys.readouterr().out


def _one_image(payload: bytes, flags: int, size: int, count: int = 1) -> bytes:
    """A fatbin of ``count`` ELF images, each ``payload`` declared to decode to ``size`` bytes."""
    header = struct.Struct("<HHIQIIHHI8xQQQ")
    image = header.pack(2, 0x101, header.size, len(payload), len(payload), 0, 8, 1, 90, flags | 0x11, 0,
                        size) + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(image) * count) + image * count


def _lz4_run(blocks: int) -> bytes:
    """An LZ4 block: one literal byte, then ``blocks`` maximal overlapping matches at offset 1."""
    match = bytes([0x1F]) + b"a" + struct.pack("<H", 1) + b"\xff" * 255 + b"\x00"  # 4 + 15 + 255 * 255
    final = bytes([0x10]) + b"!"
    return match + (bytes([0x0F]) + match[2:]) * (blocks - 1) + final


def test_lz4_expansion_is_decoded_in_linear_time():
    """Overlapping matches were copied a byte per Python iteration: a 526 KB fatbin took 51 s."""
    per_match = 4 + 15 + 255 * 255

    def reader(blocks: int):
        block = _lz4_run(blocks)
        size = 1 + per_match * blocks + 1
        return lambda: lz4_block_decompress(block, size)

    assert lz4_block_decompress(_lz4_run(3), 3 * per_match + 2) == b"a" * (3 * per_match + 1) + b"!"
    assert growth(reader, 8) < 10
    size = 256 * per_match + 2  # 16.6 MB from 66 KB: within the 255x an LZ4 block can expand
    data = _one_image(_lz4_run(256), FLAG_LZ4, size)
    (entry,) = run_within_budget(lambda: read_fatbin(data), size, "lz4 bomb", ratio=3).entries
    assert len(entry.data) == size


@pytest.mark.parametrize(("flags", "payload", "size", "message"), [
    (FLAG_LZ4, bytes([0x10]) + b"a", 256 * 2 + 17, r"image declares 529 uncompressed bytes for 2 lz4 bytes "
                                                  r"\(at most 255x"),
    (FLAG_ZSTD, zstandard.compress(b"a" * 100), 1 << 50,
     r"image declares 1125899906842624 uncompressed bytes"),
    # a zstd frame whose own header declares 2**50 bytes (it used to be allocated: MemoryError)
    (FLAG_ZSTD, b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 50) + b"\x01\x00\x00", 100,
     r"zstd frame declares 1125899906842624 bytes \(the image header says 100\)"),
])
def test_declared_sizes_are_capped_before_anything_is_allocated(flags, payload, size, message):
    data = _one_image(payload, flags, size)
    with pytest.raises(FormatError, match=message) as info:
        run_within_budget(lambda: read_fatbin(data, "bomb.fatbin"), len(data), "bomb")
    assert info.value.source == "bomb.fatbin"


def test_many_images_share_one_expansion_budget(monkeypatch):
    text = (b"\x00" * 999 + b"\x01") * 20  # ~600x compressible: each image alone is within its ratio
    payload = zstandard.compress(text)
    data = _one_image(payload, FLAG_ZSTD, len(text), count=8)
    assert len(read_fatbin(data).entries) == 8
    monkeypatch.setattr(fatbin, "TOTAL_SLACK", 0)
    with pytest.raises(FormatError, match="images decompress to more than 64x the input's size plus 0 MiB"):
        read_fatbin(data)
