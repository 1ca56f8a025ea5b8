"""Differential runs: the same kernels, the same inputs, on the CPU loader and on the GPU.

Every case runs on the CPU loader in CI (its default tier, the compiled one, and the interpreter
through tests/test_interp_tier.py) and is checked against a NumPy
reference; with a GPU (``-m gpu``) the GPU runs it on the same fresh random
inputs and must agree with the CPU loader: bit-exact for integer outputs,
to float32 rounding for float ones.  The images are those of the GPU suite
(``tests/gpu/_images.py``), so every kernel there that has PTX runs here too.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent / "gpu"))
from _images import image

Outputs = dict[str, np.ndarray]
To = Callable[[np.ndarray], "torch.Tensor"]


@dataclass(frozen=True)
class Case:
    image: str
    run: Callable[[object, np.random.Generator, To], Outputs]
    reference: Callable[[np.random.Generator], Outputs]


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _host(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy()


def vadd3(m, rng, to):
    a, b = to(_f32(rng, 1000)), to(_f32(rng, 1000))
    c = to(np.full(1000, np.nan, np.float32))
    m.vadd3(a, b, c, 1000, grid=4, block=256)
    return {"c": _host(c)}


def vadd3_ref(rng):
    return {"c": _f32(rng, 1000) + _f32(rng, 1000)}


def affine(m, rng, to):
    x, y = to(_f32(rng, 777)), to(np.zeros(777, np.float32))
    m.affine({"scale": 1.5, "shift": -3, "bias": 0.25}, x, y, 777, grid=4, block=256)
    return {"y": _host(y)}


def affine_ref(rng):
    return {"y": (1.5 * _f32(rng, 777) - 3 + 0.25).astype(np.float32)}


def reverse_shared(m, rng, to):
    x, y = to(_f32(rng, 300)), to(np.zeros(300, np.float32))
    m.reverse_shared(x, y, 300, grid=1, block=128, shared_mem=300 * 4)
    return {"y": _host(y)}


def reverse_shared_ref(rng):
    return {"y": _f32(rng, 300)[::-1].copy()}


def scale2d_strided(m, rng, to):
    base = to(_f32(rng, 64, 90))
    x = base[3::2, 1::3]  # non-contiguous both ways
    out = to(np.zeros((90, 64), np.float32)).t()[5:5 + x.shape[0], : x.shape[1]]
    m.scale2d(x, out, 1.5, grid=(4, 4), block=(16, 16))
    return {"out": _host(out)}


def scale2d_strided_ref(rng):
    return {"out": 1.5 * _f32(rng, 64, 90)[3::2, 1::3]}


def colsum_fortran(m, rng, to):
    x = to(_f32(rng, 50, 70)).t().contiguous().t()  # column-major
    out = to(np.zeros(70, np.float32))
    m.colsum(x, out, grid=1, block=128)
    return {"out": _host(out)}


def colsum_fortran_ref(rng):
    return {"out": _f32(rng, 50, 70).sum(0, dtype=np.float64).astype(np.float32)}


def float_extremes(m, rng, to):
    x, found = to(_f32(rng, 3000)), to(np.array([0.0] + [np.inf] * 4, np.float32))
    m.extremes(x, found, grid=12, block=256)
    return {"found": _host(found)}


def float_extremes_ref(rng):
    x = _f32(rng, 3000)
    return {"found": np.array([np.abs(x).max(), *(x[k::4].min() for k in range(4))], np.float32)}


def rust_saxpy(m, rng, to):
    x, y = to(_f32(rng, 5000)), to(_f32(rng, 5000))
    m.saxpy(3.0, x, y, 5000, grid=20, block=256)
    return {"y": _host(y)}


def rust_saxpy_ref(rng):
    x, y = _f32(rng, 5000), _f32(rng, 5000)
    return {"y": np.float32(3.0) * x + y}


def oxide(m, rng, to):
    a, b, c = to(_f32(rng, 1000)), to(_f32(rng, 1000)), to(np.zeros(1000, np.float32))
    m.vecadd(a, b, c, grid=4, block=256)
    x, out = to(_f32(rng, 48, 40)), to(np.zeros((40, 48), np.float32))
    m.transpose(x, out, 40, grid=(3, 3), block=(16, 16))
    tagged = to(np.zeros(300, np.float32))
    m.tagged(2.5, None, (), tagged, grid=2, block=256)  # zero-sized parameters take None / ()
    return {"c": _host(c), "t": _host(out), "tagged": _host(tagged)}


def oxide_ref(rng):
    a, b = _f32(rng, 1000), _f32(rng, 1000)
    return {"c": a + b, "t": _f32(rng, 48, 40).T.copy(), "tagged": np.full(300, 2.5, np.float32)}


def cross_language(m, rng, to):
    x, y, z = to(_f32(rng, 1000)), to(_f32(rng, 1000)), to(_f32(rng, 1000))
    m.calls_cpp(x, y, grid=4, block=256)  # numba -> C++
    m.calls_rust(z, grid=4, block=256)  # numba -> Rust
    return {"y": _host(y), "z": _host(z)}


def cross_language_ref(rng):
    x, y, z = _f32(rng, 1000), _f32(rng, 1000), _f32(rng, 1000)
    return {"y": x + y, "z": z * np.float32(2) + np.float32(1)}


def _u32(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2**32, n, dtype=np.uint32)


def hash_histogram(m, rng, to):
    n = 3000
    x = to(_u32(rng, n).view(np.int32)).view(torch.uint32) if hasattr(torch, "uint32") else None
    if x is None:
        pytest.skip("this torch has no uint32")
    hashes = to(np.zeros(n, np.uint32).view(np.int32)).view(torch.uint32)
    histogram = to(np.zeros(64, np.uint32).view(np.int32)).view(torch.uint32)
    blocks = (n + 255) // 256
    sums = to(np.zeros(blocks, np.uint64).view(np.int64)).view(torch.uint64)
    m.hash_histogram(x, hashes, histogram, sums, n, grid=blocks, block=256)
    return {name: _host(t.view(torch.int64 if t.dtype == torch.uint64 else torch.int32))
            for name, t in (("hashes", hashes), ("histogram", histogram), ("sums", sums))}


def hash_histogram_ref(rng):
    n = 3000
    x = _u32(rng, n).astype(np.uint64)
    h = (x * 2654435761) & 0xFFFFFFFF
    h ^= ((h >> 15) | (h << 17)) & 0xFFFFFFFF
    rev = np.array([int(f"{int(v):032b}"[::-1], 2) for v in h], np.uint64)
    popc = np.array([bin(int(v)).count("1") for v in x], np.uint64)
    clz = np.array([32 - int(v | 1).bit_length() for v in x], np.uint64)
    h = (rev + popc * 7 - clz) & 0xFFFFFFFF
    histogram = np.bincount((h & 63).astype(np.int64), minlength=64)
    padded = np.zeros(((n + 255) // 256) * 256, np.uint64)
    padded[:n] = h
    sums = padded.reshape(-1, 256).sum(1, dtype=np.uint64)
    return {"hashes": h.astype(np.uint32).view(np.int32), "histogram": histogram.astype(np.int32),
            "sums": sums.view(np.int64)}


CASES = {
    "cpp-vadd3": Case("cpp", vadd3, vadd3_ref),
    "cpp-struct-by-value": Case("cpp", affine, affine_ref),
    "cpp-dynamic-shared": Case("cpp", reverse_shared, reverse_shared_ref),
    "numba-strided-2d": Case("numba", scale2d_strided, scale2d_strided_ref),
    "numba-fortran": Case("numba", colsum_fortran, colsum_fortran_ref),
    "numba-float-atomics": Case("numba", float_extremes, float_extremes_ref),
    "rust-saxpy": Case("rust", rust_saxpy, rust_saxpy_ref),
    "oxide-conformance": Case("oxide", oxide, oxide_ref),
    "cross-language": Case("cross", cross_language, cross_language_ref),
    "cpp-integer-atomics-shuffles": Case("intops", hash_histogram, hash_histogram_ref),
}


def _run(case: Case, device: str, seed: int) -> Outputs:
    module = image(case.image).load(device)

    def to(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(array)).to(device)

    outputs = case.run(module, np.random.default_rng(seed), to)
    module.synchronize()
    return outputs


def _agree(got: Outputs, want: Outputs, what: str) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        if value.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], value, err_msg=f"{what}: output {name!r}")
        else:
            np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-5,
                                       err_msg=f"{what}: output {name!r}")


@pytest.mark.parametrize("name", CASES)
def test_interpreter_matches_numpy(name: str):
    seed = secrets.randbits(32)
    case = CASES[name]
    _agree(_run(case, "cpu", seed), case.reference(np.random.default_rng(seed)), f"{name} (seed {seed})")


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_gpu_agrees_with_interpreter(name: str):
    seed = secrets.randbits(32)
    case = CASES[name]
    on_gpu, on_cpu = _run(case, "cuda:0", seed), _run(case, "cpu", seed)
    _agree(on_gpu, on_cpu, f"{name}: GPU vs CPU interpreter (seed {seed})")
    _agree(on_gpu, case.reference(np.random.default_rng(seed)), f"{name}: GPU vs NumPy (seed {seed})")
