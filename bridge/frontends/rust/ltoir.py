"""rustc's LLVM IR -> LTO-IR through libNVVM, so nvJitLink can inline Rust across languages.

rustc's ``nvptx64-nvidia-cuda`` target writes plain LLVM IR (``--emit
llvm-ir``).  libNVVM reads it as NVVM IR once two things hold, both checked
or supplied here:

- **The dialect.**  libNVVM reads the LLVM of its own version for the target
  (``nvvmLLVMVersion``: LLVM 7 with typed pointers below sm_100, LLVM 22 from
  sm_100 on, libNVVM 13.5).  rustc 1.96 writes LLVM 22 with opaque pointers:
  from sm_100 on libNVVM reads it as it is; below, it is rewritten in the
  LLVM 7 dialect (:mod:`ptxbridge.rust.llvm7`).  LLVM reads no IR newer than
  its own, so a libNVVM LLVM that is neither 7 nor at least rustc's is
  refused with both versions named (``CompileError``) before libNVVM runs.
- **``!nvvmir.version``**: libNVVM refuses IR without it ("IR version 1.0
  incompatible with current version 2.0"); it is appended, stating the
  version libNVVM reports.
- **The data layout.**  libNVVM compiles rustc's (``...-i256:256-...``) only
  while nothing of the module is code-generated on its own: a kernel fails
  with "Can't create a MachineFunction using a Module with a
  Target-incompatible DataLayout attached" (and a module with no layout
  aborts libNVVM).  It is replaced by the 64-bit layout the NVVM IR
  specification prescribes, which states the same sizes and alignments for
  every type Rust has.
- **Kernels** (``define ptx_kernel``) are listed in ``@llvm.used``, as numba
  and cuda-oxide list theirs: without it the LTO link drops them.

Rust never contracts ``a * b + c`` into a fused multiply-add (rustc's own PTX
keeps ``mul.rn`` and ``add.rn``), so the IR is compiled under the no-FMA
policy and the artifact asks the link for ``-fma=0`` (``LINK_OPTIONS``,
applied by :mod:`ptxbridge.linker.finalize` to the whole link).  The IR is
rustc's after fat LTO (``core`` linked in, everything but the exported
symbols internal, the crate's panic handler included), so several Rust
LTO-IR artifacts link together.
"""

from __future__ import annotations

import re

from ptxbridge import nvvm
from ptxbridge.abi.errors import CompileError
from ptxbridge.abi.oxart import OxartOptions
from ptxbridge.rust import llvm7

__all__ = ["LINK_OPTIONS", "compile_ltoir", "nvvm_ir"]

POLICY = OxartOptions(no_fma=True)
LINK_OPTIONS = nvvm.link_options(POLICY)

DATALAYOUT = (b"e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-"
              b"v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")

_METADATA_ID = re.compile(rb"^!(\d+) = ", re.MULTILINE)
_LAYOUT = re.compile(rb'^target datalayout = "[^"]*"\n', re.MULTILINE)
_KERNEL = re.compile(rb'^define\b[^@\n]*\bptx_kernel\b[^@\n]*(@(?:"[^"]*"|[-\w$.]+))\(', re.MULTILINE)
_USED = re.compile(rb'^@llvm\.used = appending global \[(\d+) x ptr\] \[(.*)\], section "llvm\.metadata"$',
                   re.MULTILINE)


def nvvm_ir(ir: bytes, arch: str, rustc_llvm: int) -> bytes:
    """rustc's textual IR as libNVVM reads it for ``arch``, or a :class:`CompileError` saying why not."""
    reads = nvvm.llvm_major(arch)
    legacy = reads == llvm7.LLVM_MAJOR < rustc_llvm
    if reads < rustc_llvm and not legacy:
        raise CompileError(
            f"rust: output='ltoir' for {arch} needs libNVVM to read rustc's LLVM {rustc_llvm} IR, but "
            f"libNVVM reads LLVM {reads} for {arch}: older, so it cannot, and not the LLVM 7 dialect "
            f"ptxbridge rewrites IR into. Use output='ptx' (linked as a call, not inlined)")
    ir = _kernels_used(ir)
    ir = llvm7.downgrade(ir) if legacy else ir
    ir = b'target datalayout = "' + DATALAYOUT + b'"\n' + _LAYOUT.sub(b"", ir, count=1)
    if b"!nvvmir.version" in ir:
        return ir
    node = max((int(m) for m in _METADATA_ID.findall(ir)), default=-1) + 1
    version = ", ".join(f"i32 {v}" for v in nvvm.ir_version())
    return ir.rstrip(b"\n") + f"\n\n!nvvmir.version = !{{!{node}}}\n!{node} = !{{{version}}}\n".encode()


def _kernels_used(ir: bytes) -> bytes:
    """``ir`` with every ``ptx_kernel`` function in ``@llvm.used`` (rustc's own list, if any, extended)."""
    kernels = [b"ptr " + name for name in _KERNEL.findall(ir)]
    if not kernels:
        return ir
    found = _USED.search(ir)
    if found is not None:
        listed = [*found.group(2).split(b", "), *kernels]
        return ir[:found.start()] + _used(listed) + ir[found.end():]
    return ir.rstrip(b"\n") + b"\n\n" + _used(kernels) + b"\n"


def _used(entries: list[bytes]) -> bytes:
    return (b"@llvm.used = appending global [%d x ptr] [" % len(entries) + b", ".join(entries)
            + b'], section "llvm.metadata"')


def compile_ltoir(ir: bytes, name: str, arch: str, rustc_llvm: int) -> bytes:
    """LTO-IR for ``arch`` from rustc's textual IR (libNVVM ``-gen-lto -fma=0``, cached)."""
    return nvvm.compile_to_ltoir(nvvm_ir(ir, arch, rustc_llvm), name, arch, POLICY)
