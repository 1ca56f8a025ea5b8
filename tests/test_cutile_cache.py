"""cutile-rs artifacts as they persist: JIT cache entries, and the specialisation a cubin assumes.

Cache entries are made as cutile-rs makes them (``tests/_cutile_cache.py``).  The specialisation
checks run on a cutile-rs-shaped kernel (``tests/_cutile_rs.py``: NVRTC, PTX for the CPU loader)
whose signature states the promises; tests/gpu/test_gpu_tile_cache.py runs both on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

ct = pytest.importorskip("cuda.tile", reason="cutile-rs cache tests need the tile extra (cuda-tile)")
from _cutile_cache import VADD, cache_entry
from _cutile_rs import CUTILE_RS, PROMISED
from _toolchain import nvrtc_compile

import ptxbridge
import ptxbridge.tile as pt
from ptxbridge.abi.cutile_cache import CutileCacheEntry, read_cache_entry, write_cache_entry
from ptxbridge.abi.errors import ArgumentError, FormatError
from ptxbridge.abi.signature import Signature
from ptxbridge.artifacts.artifact import artifact_from_bytes
from ptxbridge.cli.inspect import format_report, inspect_path


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path / "cache"))


def test_cache_entry_loads_with_its_header_read_and_checked(tmp_path):
    path = cache_entry(tmp_path)
    art = pt.load(path)
    mangled = VADD.with_mangled_symbol("vadd").symbol
    assert set(art.kernels) == {mangled} and art.arch.startswith("sm_90")
    assert art.provenance.compiler == "cutile-rs JIT cache"
    assert "Cuda compilation tools" in art.provenance.version
    assert art.provenance.options == ("gpu=sm_90", "opt_level=3", f"key={path.stem}")
    assert pt.load(path, arch="sm_90", fingerprint=art.provenance.version).kernels == art.kernels
    with pytest.raises(FormatError, match=r"compiled for sm_90, not sm_100"):
        pt.load(path, arch="sm_100")
    with pytest.raises(FormatError, match=r"compiled by tileiras .*, not 'tileiras 0'"):
        pt.load(path, fingerprint="tileiras 0")
    with pytest.raises(FormatError, match=r"a cutile-rs JIT cache entry: read it with ptxbridge.tile.load"):
        ptxbridge.Artifact.from_file(path)
    assert "cutile-rs JIT cache entry: compiled for sm_90" in format_report(inspect_path(path))


def test_damaged_or_mislabelled_entries_are_format_errors(tmp_path):
    data = bytearray(cache_entry(tmp_path).read_bytes())
    entry = read_cache_entry(bytes(data))
    flipped = bytearray(data)
    flipped[-100] ^= 1
    with pytest.raises(FormatError, match=r"offset 0x10: the cubin's SHA-256 is not the one the header"):
        read_cache_entry(bytes(flipped))
    with pytest.raises(FormatError, match=r"add up to .* bytes but the entry has"):
        read_cache_entry(bytes(data[:-1]))
    with pytest.raises(FormatError, match=r"format version must be 1 \(got 2\)"):
        read_cache_entry(bytes(data[:12]) + b"\2\0" + bytes(data[14:]))
    with pytest.raises(FormatError, match=r"starts with b'CUTILECUBIN\\x00'"):
        read_cache_entry(b"CUTILECUBIX" + bytes(data[11:]))
    wrong = tmp_path / "wrong.cubin"
    wrong.write_bytes(write_cache_entry(CutileCacheEntry("sm_100", entry.tileiras_fingerprint, 3,
                                                         entry.bytecode_sha256, entry.cubin)))
    with pytest.raises(FormatError, match=r"says it was compiled for sm_100 but its cubin is sm_90a code"):
        pt.load(wrong)


@pytest.fixture(scope="module")
def module():
    ptx = nvrtc_compile(CUTILE_RS, ["-arch=compute_90"])
    art = artifact_from_bytes(ptx, [Signature.parse(PROMISED)], source="add.cu", name="add")
    return ptxbridge.link([art]).load("cpu")


def test_kept_promises_launch_and_compute(module):
    x = np.arange(32 * 48, dtype=np.float32).reshape(32, 48)
    y = np.zeros_like(x)
    module.add_entry(x, (y, (16, 16), (48, 1)), grid=(2, 3), block=1)
    np.testing.assert_array_equal(y, x + 1)


@pytest.mark.parametrize(("x", "tile", "strides", "broken"), [
    (np.zeros((32, 40), np.float32), (16, 16), (40, 1), r"argument 'x' \(.*\) dim 1 must be divisible by 16"),
    (np.zeros((48, 32), np.float32).T, (16, 16), (32, 1), r"argument 'x' \(.*\) stride 1 must be 1"),
    (np.zeros((32, 32), np.float32), (8, 16), (32, 1), r"argument 'y' \(.*\) partition dim 0 must be 16"),
    (np.zeros((32, 32), np.float32), (16, 16), (64, 1), r"argument 'y' \(.*\) partition strides must be the "
                                                         r"tensor's own strides \(32, 1\) \(got \(64, 1\)\)"),
])
def test_a_broken_promise_is_refused_before_launch(module, x, tile, strides, broken):
    y = np.full((32, 32), np.nan, np.float32)
    ran = module.backend.thread_instructions
    with pytest.raises(ArgumentError, match=rf"add_entry: {broken}"):
        module.add_entry(x, (y, tile, strides), grid=(2, 2), block=1)
    assert module.backend.thread_instructions == ran and np.isnan(y).all()  # nothing ran


def test_specialisation_from_a_cutile_rs_kernel_key():
    plain = Signature.parse("#[convention(cutile-rs)] kernel add(x: Tensor<f32, 2>, y: Partition<f32, 2>)")
    keyed = pt.specialise(plain, stride_args={"x": [-1, 1], "y": [-1, 1]},
                          spec_args={"x": {"shape_div": [16, 16], "stride_div": [16, 1], "base_ptr_div": 16}})
    x, y = (p.type for p in keyed.params)
    assert (x.static_stride, x.shape_divisible_by, x.stride_divisible_by, x.base_align) == (
        (None, 1), (16, 16), (16, 1), 16)  # stride_div[0] applies to the first *dynamic* stride
    assert y.own_strides and y.static_stride == (None, 1)
    assert Signature.parse(str(keyed)) == keyed
    with pytest.raises(ArgumentError, match=r"stride_args\['x'\] needs 2 entries"):
        pt.specialise(plain, stride_args={"x": [1]})
