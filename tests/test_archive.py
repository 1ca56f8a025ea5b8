"""read_archive on static libraries made by GNU ``ar`` and ``llvm-ar --format=bsd`` from real nvcc objects:
member names (short, GNU ``//`` long names, BSD ``#1/N`` names) and bytes, refusals, and linear time."""

import re
import shutil

import pytest
from _binary_samples import archive, nvcc_object
from _budget import growth

from ptxbridge.abi.archive import AR_MAGIC, read_archive
from ptxbridge.abi.errors import FormatError

LONG = "a_member_name_longer_than_fifteen_bytes.o"
TWICE = 'extern "C" __global__ void twice(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2; }\n'


def _header(name: bytes, size: int) -> bytes:
    fields = [name.ljust(16), b"0".ljust(12), b"0".ljust(6), b"0".ljust(6), b"644".ljust(8)]
    return b"".join(fields) + str(size).encode().ljust(10) + b"`\n"


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    work = tmp_path_factory.mktemp("archive")
    obj = nvcc_object(work, TWICE, "-gencode", "arch=compute_90,code=lto_90")
    return work, {"dev.o": obj, LONG: obj[::-1], "odd.txt": b"odd"}  # odd.txt: a padded member


@pytest.mark.parametrize("argv", [("ar", "rcs"), ("llvm-ar", "--format=bsd", "rcs")], ids=["gnu", "bsd"])
def test_members_in_order_with_their_bytes(members, argv):
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    work, files = members
    data = archive(work, files, *argv, name=argv[0])
    long_name = b"#1/" if "bsd" in argv[1] else b"//" + b" " * 14  # the BSD name, or the GNU // table
    assert long_name in data
    read = read_archive(data, "lib.a")
    assert [m.name for m in read] == list(files)  # the symbol index (and GNU // table) are no members
    assert [m.data for m in read] == list(files.values())
    assert all(data[m.offset : m.offset + len(m.data)] == m.data for m in read)


@pytest.fixture(scope="module")
def gnu(members):
    work, files = members
    return archive(work, files, name="gnu")


def _set(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(("make", "where", "message"), [
    (lambda d: b"!<thin>\n" + d[8:], 0, "a thin archive"),
    (lambda d: d[:40], 8, "member header needs 60 bytes (got 32)"),
    (lambda d: _set(d, 8 + 48, b"12x"), 8 + 48, "member header size must be a decimal number"),
    (lambda d: _set(d, 8 + 58, b"``"), 8 + 58, "member header must end with"),
    (lambda d: d[:-2], None, "runs past the archive end"),
    (lambda d: AR_MAGIC + _header(b"/7", 0), 8, "long name /7 is not an entry of the archive's // table"),
    (lambda d: AR_MAGIC + _header(b"//", 8) + b"abc/\nde/" + _header(b"/2", 0), 76, "long name /2 is not"),
    (lambda d: AR_MAGIC + _header(b"#1/5", 4) + b"name", 8, "BSD name of 5 bytes is longer than its member"),
], ids=["thin", "short-header", "size", "fmag", "cut-member", "no-table", "mid-entry", "bsd-name"])
def test_refusals_name_the_file_and_offset(gnu, make, where, message):
    with pytest.raises(FormatError, match=re.escape(message)) as caught:
        read_archive(make(gnu), "lib.a")
    assert caught.value.source == "lib.a"
    if where is not None:
        assert caught.value.where == f"offset {where:#x}"


def test_long_names_are_read_in_linear_time():
    """Every member names the same entry of a long // table: the entry is read once, not per member."""

    def reader(k: int):
        table = b"x" * (10000 * k)
        data = AR_MAGIC + _header(b"//", len(table)) + table + _header(b"/0", 0) * (100 * k)
        return lambda: read_archive(data)

    small = AR_MAGIC + _header(b"//", 6) + b"abcd/\n" + _header(b"/0", 0)
    assert [m.name for m in read_archive(small)] == ["abcd"]
    assert growth(reader, 8) < 10
