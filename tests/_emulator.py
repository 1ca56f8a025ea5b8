"""Helpers for the CPU emulator tests: launch PTX directly through EmulatorBackend.

Parameters are packed by the ABI layer (a Signature's layout and packer), the
same path the call path uses, so these tests exercise the loader contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.kinds import ParamType, Pointer, Scalar
from ptxbridge.abi.signature import Convention, Param, Signature
from ptxbridge.artifacts.image import Image
from ptxbridge.loaders.base import Buffer
from ptxbridge.loaders.emulator import EmulatorBackend


def ptr(t: str) -> Pointer:
    return Pointer(Scalar(dtype(t)))


def scalar(t: str) -> Scalar:
    return Scalar(dtype(t))


def backend(*ptx: bytes | str, **options: Any) -> EmulatorBackend:
    texts = tuple(p.encode() if isinstance(p, str) else p for p in ptx)
    return EmulatorBackend(Image(cubin=None, arch=None, kernels={}, ptx=texts), **options)


def buffers(arrays: Sequence[np.ndarray], readonly: Sequence[np.ndarray] = ()) -> list[Buffer]:
    ro = {id(a) for a in readonly}
    return [Buffer(a.ctypes.data, a.nbytes, id(a) not in ro, a) for a in arrays]


def launch(be: EmulatorBackend, name: str, kinds: Sequence[ParamType], values: Sequence[Any],
           grid: Any, block: Any, arrays: Sequence[np.ndarray] = (), *, shared: int = 0,
           readonly: Sequence[np.ndarray] = (), convention: Convention = Convention.C) -> None:
    sig = Signature(name, tuple(Param(f"p{i}", k) for i, k in enumerate(kinds)), convention=convention)
    params = sig.layout.packer().pack(values)
    grid = (grid,) if isinstance(grid, int) else grid
    block = (block,) if isinstance(block, int) else block
    be.launch(name, tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)), shared,
              None, params, buffers(arrays, readonly))


def numba_array(a: np.ndarray) -> list[int]:
    """numba-cuda's flat array parameters: meminfo, parent, nitems, itemsize, data, shape, strides."""
    return [0, 0, a.size, a.itemsize, a.ctypes.data, *a.shape, *a.strides]


def kernel_ptx(body: str, params: str = ".param .u64 out", regs: str = "", globals_: str = "",
               name: str = "k") -> str:
    """A hand-written one-kernel module around ``body``."""
    return (f".version 8.0\n.target sm_90\n.address_size 64\n{globals_}\n"
            f".visible .entry {name}({params})\n{{\n{regs}\n{body}\n}}\n")


def stored_per_thread(register: str) -> str:
    """PTX that stores u32 ``register`` to ``out[%r0]`` (``%r0``: the thread's x index) and returns."""
    return f"""ld.param.u64 %rd1, [out];
mul.wide.u32 %rd2, %r0, 4;
add.s64 %rd1, %rd1, %rd2;
st.global.u32 [%rd1], {register};
ret;"""


_REG = {1: "b16", 2: "b16", 4: "b32", 8: "b64"}
_LD = {1: "u8", 2: "b16", 4: "b32", 8: "b64"}


def elementwise(instruction: str, out: type, *inputs: np.ndarray) -> np.ndarray:
    """One thread per element: run ``instruction`` on registers %a %b %c (inputs), %d (output),
    scratch %u (b32), %p %q (predicates); return the outputs."""
    n = len(inputs[0])
    out_dt = np.dtype(out)
    regs = [f".reg .{_REG[x.itemsize]} %{'abc'[i]};" for i, x in enumerate(inputs)]
    regs += [f".reg .{_REG[out_dt.itemsize]} %d;", ".reg .b64 %rd<4>;", ".reg .b32 %t, %u;",
             ".reg .pred %p, %q;"]
    body = ["mov.u32 %t, %tid.x;"]
    for i, x in enumerate(inputs):
        body += [f"ld.param.u64 %rd1, [p{i}];", f"mul.wide.u32 %rd2, %t, {x.itemsize};",
                 "add.s64 %rd3, %rd1, %rd2;", f"ld.global.{_LD[x.itemsize]} %{'abc'[i]}, [%rd3];"]
    body += [instruction, f"ld.param.u64 %rd1, [p{len(inputs)}];",
             f"mul.wide.u32 %rd2, %t, {out_dt.itemsize};", "add.s64 %rd3, %rd1, %rd2;",
             f"st.global.{_LD[out_dt.itemsize]} [%rd3], %d;", "ret;"]
    params = ", ".join(f".param .u64 p{i}" for i in range(len(inputs) + 1))
    be = backend(kernel_ptx("\n".join(body), params, "\n".join(regs)))
    result = np.zeros(n, out_dt)
    arrays = [np.ascontiguousarray(x) for x in inputs] + [result]
    launch(be, "k", [ptr("u8")] * len(arrays), [a.ctypes.data for a in arrays], grid=1, block=n,
           arrays=arrays)
    return result


def round_f32(x: Fraction, mode: str, dt: type = np.float32) -> float:
    """The f32 (or ``dt``) nearest / toward zero / down / up from an exact rational (finite range)."""
    near = dt(float(x))
    lo = near if Fraction(float(near)) <= x else np.nextafter(near, dt(-np.inf))
    if Fraction(float(lo)) == x:
        return float(lo)
    hi = np.nextafter(lo, dt(np.inf))
    if mode == "rm" or (mode == "rz" and x > 0):
        return float(lo)
    if mode == "rp" or mode == "rz":
        return float(hi)
    below, above = x - Fraction(float(lo)), Fraction(float(hi)) - x
    if below != above:
        return float(lo if below < above else hi)
    return float(lo if int(lo.view(np.uint16 if dt is np.float16 else np.uint32)) % 2 == 0 else hi)
