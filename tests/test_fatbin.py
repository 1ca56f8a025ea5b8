"""read_fatbin on containers made by ``fatbinary`` (plain, LZ4, zstd) and on a host ELF's ``.nv_fatbin``."""

import re
import struct

import pytest
from _binary_samples import fatbinary, host_object, ltoir, ptx, ptxas

from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.fatbin import lz4_block_decompress, read_fatbin


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
