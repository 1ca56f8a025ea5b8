"""Real binary code objects for the reader tests, built with the real CUDA tools.

NVRTC -> PTX, ptxas and nvJitLink -> cubins, tileiras (through cuda-tile)
-> a Tile IR cubin, ``fatbinary`` -> fatbins, gcc/objcopy -> host ELFs with
``.nv_fatbin`` / ``.oxart`` sections, ``nvcc -dc`` -> host objects and ``ar`` -> static
libraries; ``cuobjdump -elf`` as the independent
reference.  Tests call these from module-scoped fixtures.  (No ``from
__future__ import annotations``: cuTile evaluates the kernel's annotations.)
"""

import io
import re
import subprocess
from pathlib import Path

from _toolchain import InputType, link, nvrtc_compile, run, tool

from ptxbridge.abi.oxart import EntryKind, OxartBundle, OxartEntry, OxartOptions, OxartPayload, PayloadKind

CUDA_SOURCE = r"""
struct Pair { float a; double b; int c; };          // 24 bytes, align 8
struct Small { char x; short y; };                   // 4 bytes, align 2
__device__ __noinline__ float helper(float x, float y) { return x * y + 1.0f; }
extern "C" __device__ __noinline__ float exported_fn(float x) { return x * 3.0f; }
extern "C" __global__ void __launch_bounds__(256) saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = helper(a, x[i]) + exported_fn(y[i]);
}
extern "C" __global__ void withstruct(Pair p, Small s, char c, double* out, long long k) {
  __shared__ float tile[128];
  __shared__ double tile2[16];
  tile[threadIdx.x] = p.a + s.x + c;
  tile2[threadIdx.x % 16] = p.b;
  __syncthreads();
  out[threadIdx.x] = tile[127 - threadIdx.x] + p.c + k + s.y + tile2[3];
}
#if __CUDA_ARCH__ >= 900
extern "C" __global__ void __cluster_dims__(2, 1, 1) clustered(int* p) { p[threadIdx.x] = blockIdx.x; }
#endif
extern "C" __global__ void __launch_bounds__(128, 4) bounded(int* p) { p[threadIdx.x] = 1; }
extern "C" __global__ void noargs() {}
"""

# Hand-written PTX for the directives NVRTC has no spelling for; ptxas assembles it.
DIRECTIVES_PTX = """\
.version 8.8
.target {arch}
.address_size 64
.visible .entry req(.param .u64 p, .param .align 16 .b8 agg[40], .param .u16 h)
.reqntid 64, 2, 1
{{ ret; }}
.visible .entry ranked(.param .u32 a)
.explicitcluster
.maxclusterrank 8
{{ ret; }}
"""

# (ordinal, offset, size) per kernel, worked out by hand from the C++ above (natural alignment).
EXPECTED_KPARAMS = {
    "saxpy": [(0, 0, 4), (1, 8, 8), (2, 16, 8), (3, 24, 4)],
    "withstruct": [(0, 0, 24), (1, 24, 4), (2, 28, 1), (3, 32, 8), (4, 40, 8)],
    "clustered": [(0, 0, 8)],
    "bounded": [(0, 0, 8)],
    "noargs": [],
}


def ptx(arch: str) -> bytes:
    """NVRTC PTX of :data:`CUDA_SOURCE` for ``arch`` (``"sm_90"``...)."""
    return nvrtc_compile(CUDA_SOURCE, [f"-arch=compute_{arch[3:]}", "-std=c++17"])


def ltoir(arch: str = "sm_90") -> bytes:
    return nvrtc_compile(CUDA_SOURCE, [f"-arch=compute_{arch[3:]}", "-dlto", "-rdc=true"], output="ltoir")


def ptxas(tmp: Path, ptx_text: bytes, arch: str, *, relocatable: bool = False, name: str = "k") -> bytes:
    """Assemble with ptxas (``-c`` for a relocatable cubin)."""
    src, out = tmp / f"{name}_{arch}.ptx", tmp / f"{name}_{arch}{'_rdc' if relocatable else ''}.cubin"
    src.write_bytes(ptx_text)
    run(tool("ptxas"), *(["-c"] if relocatable else []), f"-arch={arch}", str(src), "-o", str(out))
    return out.read_bytes()


def nvjitlink_cubin(ptx_text: bytes, arch: str) -> bytes:
    return link([(InputType.PTX, ptx_text)], [f"-arch={arch}"])


def tile_cubin(arch: str = "sm_90") -> bytes:
    """Two cuTile vadd instances (t1 convention, int32 and int64 index) assembled by tileiras."""
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint

    @ct.kernel
    def vadd(a, b, c, n, tile: ct.Constant[int]):
        bid = ct.bid(0)
        x = ct.load(a, index=(bid,), shape=(tile,))
        y = ct.load(b, index=(bid,), shape=(tile,))
        ct.store(c, index=(bid,), tile=x + y)

    def array(dtype, index):
        return ArrayConstraint(dtype, 1, index_dtype=index, stride_lower_bound_incl=0, alias_groups=(),
                               may_alias_internally=False)

    t1 = CallingConvention.cutile_python_v1()
    sigs = [KernelSignature([array(ct.float32, ct.int32)] * 3 + [ScalarConstraint(ct.int32), 256], t1),
            KernelSignature([array(ct.float16, ct.int64)] * 3 + [ScalarConstraint(ct.int64), 128], t1)]
    buf = io.BytesIO()
    from cuda.tile.compilation import export_kernel

    export_kernel(vadd, sigs, buf, gpu_code=arch, output_format="cubin")
    return buf.getvalue()


def fatbinary(tmp: Path, images: list[tuple[str, str, bytes]], *options: str, name: str = "x") -> bytes:
    """Run ``fatbinary --create`` on (kind, sm, bytes) images; kinds elf, ptx, nvvm (LTO-IR)."""
    args = []
    for i, (kind, sm, data) in enumerate(images):
        path = tmp / f"{name}_img{i}.{kind}"
        path.write_bytes(data)
        args.append(f"--image3=kind={kind},sm={sm},file={path}")
    out = tmp / f"{name}.fatbin"
    run(tool("fatbinary"), f"--create={out}", *options, *args)
    return out.read_bytes()


def host_object(tmp: Path, sections: dict[str, bytes], name: str = "host") -> bytes:
    """A real x86-64 host object (gcc -c) with extra data sections added by objcopy."""
    c = tmp / f"{name}.c"
    c.write_text("int host_side(int x) { return x + 1; }\n")
    obj = tmp / f"{name}.o"
    run("gcc", "-c", str(c), "-o", str(obj))
    for section, data in sections.items():
        blob = tmp / f"{name}{section.replace('.', '_')}.bin"
        blob.write_bytes(data)
        run("objcopy", "--add-section", f"{section}={blob}",
            "--set-section-flags", f"{section}=alloc,readonly,data", str(obj))
    return obj.read_bytes()


def nvcc_object(tmp: Path, source: str, *options: str, name: str = "dev") -> bytes:
    """``nvcc -dc`` of ``source``: a host object whose ``.nv_fatbin`` holds what ``options`` ask for."""
    cu, obj = tmp / f"{name}.cu", tmp / f"{name}.o"
    cu.write_text(source)
    run(tool("nvcc"), "-dc", *options, str(cu), "-o", str(obj))
    return obj.read_bytes()


def archive(tmp: Path, members: dict[str, bytes], *argv: str, name: str = "lib") -> bytes:
    """A static library of ``members`` (file name -> bytes) made by ``argv`` (GNU ``ar rcs`` unless
    given, e.g. ``llvm-ar --format=bsd rcs``); GNU ``ar`` puts names over 15 bytes in its ``//`` table."""
    folder = tmp / f"{name}_members"
    folder.mkdir(exist_ok=True)
    for member, data in members.items():
        (folder / member).write_bytes(data)
    out = tmp / f"{name}.a"
    out.unlink(missing_ok=True)
    run(*(argv or ("ar", "rcs")), str(out), *members, cwd=folder)
    return out.read_bytes()


def host_object_with_c_section(tmp: Path, blob: bytes, name: str = "oxhost") -> bytes:
    """A host object whose ``.oxart`` section gcc itself emits from a C array."""
    body = ", ".join(str(b) for b in blob)
    c = tmp / f"{name}.c"
    c.write_text(f'__attribute__((section(".oxart"), used)) static const unsigned char ox[{len(blob)}] = '
                 f"{{{body}}};\nint host_side(void) {{ return 1; }}\n")
    obj = tmp / f"{name}.o"
    run("gcc", "-c", str(c), "-o", str(obj))
    return obj.read_bytes()


def cuobjdump_elf(path: Path) -> str:
    """``cuobjdump -elf`` output, the independent reference for cubin contents."""
    return subprocess.run([tool("cuobjdump"), "-elf", str(path)], check=True, capture_output=True,
                          text=True).stdout


def _nvinfo_blocks(dump: str) -> dict[str, str]:
    """Kernel name -> text of its ``.nv.info.<kernel>`` block (blocks start at column 0)."""
    blocks = {}
    for block in re.split(r"\n(?=[.\w])", dump):
        head = re.match(r"\.nv\.info\.(\S+)\n", block)
        if head:
            blocks[head.group(1)] = block
    return blocks


def cuobjdump_kparams(dump: str) -> dict[str, list[tuple[int, int, int]]]:
    """(ordinal, offset, size) per kernel from the ``.nv.info.<kernel>`` blocks of a dump."""
    pattern = r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)"
    return {name: sorted((int(o, 16), int(f, 16), int(s, 16)) for o, f, s in re.findall(pattern, block))
            for name, block in _nvinfo_blocks(dump).items()}


def cuobjdump_attr(dump: str, kernel: str, attr: str) -> str | None:
    """The ``Value:`` text of attribute ``attr`` in ``.nv.info.<kernel>`` ("" for EIFMT_NVAL), or None."""
    block = _nvinfo_blocks(dump).get(kernel, "")
    found = re.search(rf"Attribute:\s*{attr}\n\s*Format:\s*(\S+)\n(?:\s*Value:\s*([^\n]*))?", block)
    if found is None:
        return None
    return "" if found.group(1) == "EIFMT_NVAL" else (found.group(2) or "").strip()


def oxart_bundles(ptx_text: bytes, cubin: bytes, lto: bytes) -> list[OxartBundle]:
    """Three bundles covering every payload kind, both entry kinds, metadata and every option."""
    return [
        OxartBundle("vecadd_crate", "sm_80",
                    (OxartPayload(PayloadKind.PTX, "vecadd.ptx", ptx_text),
                     OxartPayload(PayloadKind.CUBIN, "vecadd.cubin", cubin)),
                    (OxartEntry(EntryKind.KERNEL, "saxpy"), OxartEntry(EntryKind.KERNEL, "withstruct"),
                     OxartEntry(EntryKind.DEVICE_FUNCTION, "exported_fn", metadata=0xDEADBEEF00000001))),
        OxartBundle("lto_crate", "sm_90",
                    (OxartPayload(PayloadKind.LTOIR, "lib.ltoir", lto),
                     OxartPayload(PayloadKind.NVVM_IR, "lib.ll", b'target triple = "nvptx64-nvidia-cuda"\n')),
                    (OxartEntry(EntryKind.DEVICE_FUNCTION, "exported_fn"),),
                    OxartOptions(no_fma=True, line_tables=True)),
        OxartBundle("debug_crate", "sm_100", (OxartPayload(PayloadKind.PTX, "d.ptx", ptx_text),), (),
                    OxartOptions(debug=True)),
    ]
