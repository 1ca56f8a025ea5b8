"""Direct NVRTC / nvJitLink / CUDA-binary-tool calls for the frontend tests (no driver needed).

The tests use these to build the *other* side of a cross-language call and
real code objects of every kind, independently of the code under test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from cuda.bindings import nvjitlink, nvrtc

BIN = Path(nvrtc.__file__).parents[2] / "nvidia" / "cu13" / "bin"
InputType = nvjitlink.InputType


def tool(name: str) -> str:
    """Path of a CUDA binary tool (ptxas, fatbinary, nvcc...) from the pip wheels or PATH."""
    candidate = BIN / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found in {BIN} or on PATH")
    return found


def nvrtc_compile(source: str, options: list[str], output: str = "ptx") -> bytes:
    """CUDA C++ -> PTX (``output="ptx"``), cubin (``"cubin"``, needs ``-arch=sm_XY``) or
    LTO-IR (``"ltoir"``, needs ``-dlto``)."""
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"test.cu", 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = bytearray(size)  # never b" " * size: NVRTC writes into it (see bridge/nvrtc.py)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(log.decode(errors="replace"))
        get_size, get = {"ptx": (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX),
                         "cubin": (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN),
                         "ltoir": (nvrtc.nvrtcGetLTOIRSize, nvrtc.nvrtcGetLTOIR)}[output]
        _, size = get_size(prog)
        buf = bytearray(size)
        get(prog, buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(buf).rstrip(b"\0") if output == "ptx" else bytes(buf)


def link(inputs: list[tuple[object, bytes]], options: list[str], output: str = "cubin") -> bytes:
    """nvJitLink ``inputs`` ((InputType, data) pairs) into a cubin, or PTX with ``-ptx``."""
    handle = nvjitlink.create(len(options), options)
    try:
        for i, (kind, data) in enumerate(inputs):
            nvjitlink.add_data(handle, kind, data, len(data), f"input{i}")
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise RuntimeError(log.decode(errors="replace")) from exc
        if output == "cubin":
            buf = bytearray(nvjitlink.get_linked_cubin_size(handle))
            nvjitlink.get_linked_cubin(handle, buf)
        else:
            buf = bytearray(nvjitlink.get_linked_ptx_size(handle))
            nvjitlink.get_linked_ptx(handle, buf)
    finally:
        nvjitlink.destroy(handle)
    return bytes(buf).rstrip(b"\0") if output == "ptx" else bytes(buf)


def llvm_as(major: int) -> Path | None:
    """LLVM ``major``'s ``llvm-as`` (Debian: ``llvm-as-22`` or ``/usr/lib/llvm-22/bin``), or None."""
    found = Path(shutil.which(f"llvm-as-{major}") or f"/usr/lib/llvm-{major}/bin/llvm-as")
    return found if found.is_file() else None


def assemble(text: bytes, where: Path, major: int = 22) -> bytes:
    """LLVM IR ``text`` as bitcode, written by LLVM ``major``'s ``llvm-as`` in ``where``
    (FileNotFoundError without it)."""
    tool = llvm_as(major)
    if tool is None:
        raise FileNotFoundError(f"LLVM {major}'s llvm-as not found (llvm-as-{major}, /usr/lib/llvm-{major})")
    source, out = where / "in.ll", where / "out.bc"
    source.write_bytes(text)
    run(str(tool), str(source), "-o", str(out))
    return out.read_bytes()


def run(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, cwd=cwd)
