"""The images the GPU suite runs, built by ptxbridge's own frontends and linker.

Each builder compiles real sources (NVRTC, numba-cuda, Debian rustc, cuTile
and tileiras) and links with nvJitLink for sm_90 (the images ``TARGETS`` names:
for each target it lists, with the oldest one's PTX).  Every image the suite runs
has gone through the public saved-image format (``Image.save`` / ``Image.open``,
docs/image-format.md): a machine with the toolchains writes them with
``python tests/gpu/_images.py DIR`` (one ``NAME.ptxb`` per image), and a GPU
machine given ``PTXBRIDGE_GPU_IMAGES=DIR`` opens them from there, so it needs
no rustc, numba, cuTile or tileiras.  Without the variable each image is built
here and passed through the format in memory (``to_bytes`` / ``from_bytes``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ptxbridge.abi.errors import ToolchainError
from ptxbridge.artifacts.image import Image

ARCH = "sm_90"
HERE = Path(__file__).parent
RUST_DIR = HERE.parent / "rust"

CPP = r"""
struct Affine { float scale; int shift; double bias; };
__constant__ float gain;
__device__ unsigned int launches;

extern "C" __global__ void vadd3(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
struct Span { float* data; unsigned long long len; };
extern "C" __global__ void span_axpy(Span x, Span y, float a) {  // tensors inside by-value structs
    unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < y.len && i < x.len) y.data[i] += a * x.data[i];
}
extern "C" __global__ void affine(Affine p, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (float)(p.scale * x[i] + p.shift + p.bias);
}
extern "C" __global__ void scaled(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) atomicAdd(&launches, 1u);
    if (i < n) y[i] = gain * x[i];
}
extern "C" __global__ void reverse_shared(const float* x, float* y, int n) {
    extern __shared__ float tile[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = tile[n - 1 - i];
}
extern "C" __global__ void out_of_bounds(float* x, long long offset) {
    x[offset + threadIdx.x] = 1.0f;
}
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" __global__ void raxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

CPP_MY_ADD = r"""
extern "C" __device__ float my_add(float a, float b) { return a + b; }
"""

CPP_CALLS_NUMBA = r"""
extern "C" __device__ float nb_fma(float x, float y);
extern "C" __global__ void calls_numba(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = nb_fma(x[i], 2.0f);
}
"""


def _cpp() -> list:
    from ptxbridge import nvrtc

    return [nvrtc.compile(CPP, arch=ARCH)]


CPP_COOPERATIVE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void neighbour_sum(float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i];
    cg::this_grid().sync();  // every block's doubling is visible after this
    if (i < n) y[i] = x[i] + x[(i + blockDim.x) % n];
}
"""


def _cuda_includes() -> list[str]:
    """-I options for cooperative_groups.h and the CCCL headers it includes (nv/target)."""
    import glob

    import nvidia

    roots = [f"{p}/cu13/include" for p in nvidia.__path__] + sorted(glob.glob("/usr/local/cuda*/include"))
    found = [r for r in roots if glob.glob(f"{r}/cooperative_groups.h")][:1]
    found += [c for c in [f"{r}/cccl" for r in roots] + roots if glob.glob(f"{c}/nv/target")][:1]
    if len(found) < 2:
        raise ToolchainError(f"cooperative_groups.h and nv/target not both found under {roots}")
    return [f"-I{d}" for d in found]


def _coop() -> list:
    from ptxbridge import nvrtc

    return [nvrtc.compile(CPP_COOPERATIVE, arch=ARCH, options=_cuda_includes())]


def _numba_kernels():
    from numba import cuda

    def scale2d(x, out, alpha):
        i, j = cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            out[i, j] = alpha * x[i, j]

    def colsum(x, out):  # F-ordered input: column j is contiguous
        j = cuda.grid(1)
        if j < x.shape[1]:
            total = 0.0
            for i in range(x.shape[0]):
                total += x[i, j]
            out[j] = total

    def pair_add(pair, out):  # a tuple of arrays: each item its own parameters
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = pair[0][i] + pair[1][i]

    def extremes(x, found):  # float atomic max and min: loops of atom.cas on the floats' bits
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.max(found, 0, abs(x[i]))
            cuda.atomic.min(found, 1 + i % 4, x[i])

    return scale2d, colsum, pair_add, extremes


def _numba() -> list:
    import ptxbridge.numba as pn

    scale2d, colsum, pair_add, extremes = _numba_kernels()
    return [pn.compile(scale2d, "void(float32[:, :], float32[:, :], float32)", arch=ARCH, name="scale2d"),
            pn.compile(colsum, "void(float32[::1, :], float32[::1])", arch=ARCH, name="colsum"),
            pn.compile(pair_add, "void(UniTuple(float32[::1], 2), float32[::1])", arch=ARCH, name="pair_add"),
            pn.compile(extremes, "void(float32[::1], float32[::1])", arch=ARCH, name="extremes")]


def _rust() -> list:
    import ptxbridge.rust

    return [ptxbridge.rust.compile(HERE.parent.parent / "examples" / "kernels" / "scale.rs")]


def _oxide() -> list:
    """cuda-oxide conformance kernels: PTX with oxide's lowering, typed from the #[kernel] source."""
    import tempfile

    import ptxbridge.oxide as ox
    import ptxbridge.rust

    ptx = ptxbridge.rust.compile(RUST_DIR / "oxide" / "kernels_ptx.rs", progress=False).code
    path = Path(tempfile.mkdtemp()) / "kernels.ptx"
    path.write_bytes(ptx)
    return [ox.load(path, RUST_DIR / "oxide" / "kernels.rs")]


def _tile_array(groups: tuple[str, ...] = (), divisible: int = 1):
    """A 1-d float32 cuTile array with int32 indices, in alias ``groups``, its length divisible by
    ``divisible``."""
    import cuda.tile as ct
    from cuda.tile import compilation as tc

    return tc.ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0,
                              alias_groups=groups, may_alias_internally=False, shape_divisible_by=divisible)


def _tile_vadd(symbol: str, arrays: list) -> list:
    """``tile_vadd`` exported by cuTile (tileiras) as ``symbol``, its arrays constrained by ``arrays``."""
    from _tile_kernels import tile_vadd
    from cuda.tile import compilation as tc

    import ptxbridge.tile as pt

    sig = tc.KernelSignature([*arrays, 256], tc.CallingConvention.cutile_python_v1(), symbol=symbol)
    return [pt.export(tile_vadd, sig, arch=ARCH)]


def _tile() -> list:
    return _tile_vadd("tile_vadd", [_tile_array(divisible=256)] * 3)


def _tile_groups() -> list:
    """``a`` and ``b`` in one alias group, ``c`` in none: the overlaps the aliasing test launches."""
    return _tile_vadd("tile_vadd_groups", [_tile_array(("in",)), _tile_array(("in",)), _tile_array()])


def _tile_cache() -> list:
    """A cutile-rs JIT cache entry made by tileiras for sm_90 (tests/_cutile_cache.py), its header
    checked for sm_90 by ``tile.load``."""
    import tempfile

    from _cutile_cache import cache_entry

    import ptxbridge.tile as pt

    with tempfile.TemporaryDirectory() as folder:
        try:
            entry = cache_entry(Path(folder), gpu=ARCH)
        except FileNotFoundError as exc:  # no tileiras
            raise ToolchainError(str(exc)) from exc
        return [pt.load(entry, arch=ARCH)]


def _tile_promises() -> list:
    """The cutile-rs-shaped kernel (tests/_cutile_rs.py) as an NVRTC cubin, loaded by ``tile.load``
    with the signature that states its promises; needs no cuda.tile."""
    import tempfile

    from _cutile_rs import CUTILE_RS, PROMISED
    from _toolchain import nvrtc_compile

    import ptxbridge.tile as pt

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "add.cubin"
        path.write_bytes(nvrtc_compile(CUTILE_RS, [f"-arch={ARCH}"], "cubin"))
        return [pt.load(path, PROMISED)]


def _cross() -> list:
    """The three cross-language calls: numba -> C++, numba -> Rust, C++ -> numba (LTO-IR)."""
    from numba import cuda

    import ptxbridge.numba as pn
    import ptxbridge.rust
    from ptxbridge import nvrtc

    my_add = cuda.declare_device("my_add", "float32(float32, float32)", abi="c")
    rust_fma = cuda.declare_device("rust_fma", "float32(float32, float32, float32)", abi="c")

    def calls_cpp(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = my_add(x[i], y[i])

    def calls_rust(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = rust_fma(x[i], 2.0, 1.0)

    return [
        pn.compile(calls_cpp, "void(float32[::1], float32[::1])", arch=ARCH, name="calls_cpp",
                   imports=[my_add]),
        nvrtc.compile(CPP_MY_ADD, arch=ARCH),
        pn.compile(calls_rust, "void(float32[::1])", arch=ARCH, name="calls_rust", imports=[rust_fma]),
        ptxbridge.rust.compile(RUST_DIR / "device_fn.rs", arch="sm_80"),
    ]


CPP_INTOPS = r"""
// Integer work whose results must be bit-exact on the GPU and the CPU interpreter:
// a hash per element, a histogram with atomics, and a block sum with shared memory and shuffles.
extern "C" __global__ void hash_histogram(const unsigned int* x, unsigned int* hashes,
                                          unsigned int* histogram, unsigned long long* block_sums, int n) {
    __shared__ unsigned long long warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int h = 0;
    if (i < n) {
        h = x[i] * 2654435761u;
        h ^= (h >> 15) | (h << 17);
        h = __brev(h) + __popc(x[i]) * 7u - (unsigned int)__clz(x[i] | 1u);
        hashes[i] = h;
        atomicAdd(&histogram[h & 63u], 1u);
    }
    unsigned long long v = h;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long total = 0;
        for (int w = 0; w < (blockDim.x + 31) / 32; ++w) total += warp_sums[w];
        block_sums[blockIdx.x] = total;
    }
}
"""


def _intops() -> list:
    from ptxbridge import nvrtc

    return [nvrtc.compile(CPP_INTOPS, arch=ARCH)]


CPP_DYNAMIC_PARALLELISM = r"""
extern "C" __global__ void child(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" __global__ void parent(float* x) { if (threadIdx.x == 0) child<<<1, 32>>>(x); }
"""


def _dynpar() -> list:
    from ptxbridge import nvrtc

    return [nvrtc.compile(CPP_DYNAMIC_PARALLELISM, arch=ARCH)]  # linked with libcudadevrt.a


def _lto() -> list:
    import ptxbridge.numba as pn
    from ptxbridge import nvrtc

    return [pn.compile(lambda x, y: x * y + 1.0, "float32(float32, float32)", device=True,
                       output="ltoir", name="nb_fma", arch=ARCH),
            nvrtc.compile(CPP_CALLS_NUMBA, arch=ARCH, output="ltoir")]


def _debug() -> list:
    """A numba kernel compiled with debug=True: a thread's exception goes to numba's flag (saved images
    keep the flag, not the exception table: ptxbridge reports the exception's code)."""
    import math

    from numba import cuda

    import ptxbridge.numba as pn

    def checked_log(x, out):
        i = cuda.grid(1)
        if i < x.shape[0]:
            if x[i] < 0:
                raise ValueError("negative input")
            out[i] = math.log(x[i])

    return [pn.compile(checked_log, "void(float32[::1], float32[::1])", arch=ARCH,
                       options=pn.NumbaOptions(debug=True, opt=False))]


def _rust_panics(output: str, panic_messages: str = "full") -> Callable[[], list]:
    """Idiomatic Rust (slices, iterators, no panic handler): ptxbridge's handler records a panic in
    ``__ptxbridge_panic`` (saved images keep the global) and the call raises after the launch."""
    def build() -> list:
        import ptxbridge.rust

        return [ptxbridge.rust.compile(RUST_DIR / "idiomatic.rs", arch=ARCH, output=output, progress=False,
                                       panic_messages=panic_messages)]
    return build


CPP_SCALE = r"""
extern "C" __global__ void scale_shift(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + 1.0f;
}
"""


def _targets() -> list:
    """A C++ kernel as sm_80 PTX: linked for several targets (TARGETS), its PTX the sm_80 one."""
    from ptxbridge import nvrtc

    return [nvrtc.compile(CPP_SCALE, arch="sm_80")]


def _oxide_nvvm() -> list:
    """cuda-oxide's opaque-pointer NVVM IR with libdevice calls (tests/rust/oxide/opaque.ll), its
    ``.target`` sm_90: libNVVM reads it for sm_90 once ptxbridge rewrites it (ptxbridge.nvvm.dialect)."""
    import shutil
    import tempfile

    import ptxbridge.oxide as ox

    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(RUST_DIR / "oxide" / "opaque.ll", Path(folder) / "opaque.ll")
        (Path(folder) / "opaque.target").write_text(f"{ARCH}\n")
        return [ox.load(Path(folder) / "opaque.ll", RUST_DIR / "oxide" / "opaque.rs")]


def _oxide_bitcode() -> list:
    """tests/rust/oxide/opaque.ll as bitcode (LLVM 22's llvm-as) in an .oxart bundle for sm_90: read
    as text by llvmlite and rewritten for libNVVM below sm_100 (ptxbridge.nvvm.bitcode)."""
    import tempfile

    from _toolchain import assemble

    import ptxbridge.oxide as ox
    from ptxbridge.abi.oxart import EntryKind, OxartBundle, OxartEntry, OxartPayload, PayloadKind, write_oxart

    with tempfile.TemporaryDirectory() as folder:
        try:
            code = assemble((RUST_DIR / "oxide" / "opaque.ll").read_bytes(), Path(folder))
        except FileNotFoundError as exc:
            raise ToolchainError(str(exc)) from None
        entries = tuple(OxartEntry(EntryKind.KERNEL, k) for k in ("powscale", "softplus"))
        payload = OxartPayload(PayloadKind.NVVM_IR, "opaque.bc", code)
        (Path(folder) / "app").write_bytes(write_oxart([OxartBundle("opaque", ARCH, (payload,), entries)]))
        return [ox.load(Path(folder) / "app", RUST_DIR / "oxide" / "opaque.rs")]


BUILDERS: dict[str, Callable[[], list]] = {
    "cpp": _cpp, "coop": _coop, "numba": _numba, "rust": _rust, "oxide": _oxide, "tile": _tile,
    "tile_groups": _tile_groups, "tile_cache": _tile_cache, "tile_promises": _tile_promises,
    "cross": _cross, "lto": _lto, "intops": _intops, "dynpar": _dynpar, "debug": _debug,
    "rust_panics": _rust_panics("ptx"), "rust_panics_lto": _rust_panics("ltoir"),
    "rust_panics_location": _rust_panics("ptx", "location"),
    "targets_80_100": _targets, "targets_80_90_100": _targets, "oxide_nvvm": _oxide_nvvm,
    "oxide_bitcode": _oxide_bitcode, "targets_90a_100": _targets,
}
TARGETS = {"targets_80_100": ["sm_80", "sm_100"], "targets_80_90_100": ["sm_80", "sm_90", "sm_100"],
           "targets_90a_100": ["sm_90a", "sm_100"]}


def _store() -> Path | None:
    found = os.environ.get("PTXBRIDGE_GPU_IMAGES")
    return Path(found) if found else None


def build(name: str) -> Image:
    """Compile and link image ``name`` with the frontends on this machine, for sm_90 or its
    ``TARGETS`` (a tileiras cubin makes it an sm_90a image: ``choose_arch``); a frontend package
    that is not installed (cuda.tile, numba-cuda) is a ToolchainError, as a missing compiler is."""
    from ptxbridge.linker import link

    try:
        parts = BUILDERS[name]()
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("cuda", "numba")):
            raise
        raise ToolchainError(f"{exc.name} is not installed") from exc
    return link(parts, arch=TARGETS.get(name, ARCH))


def path(name: str, where: Path) -> Path:
    """Where image ``name`` is saved in ``where``."""
    return where / f"{name}.ptxb"


def image(name: str) -> Image:
    """Image ``name``, opened from ``PTXBRIDGE_GPU_IMAGES`` when set (a missing file fails: build
    the folder with this script), else built here and passed through the saved-image format (skips
    when a toolchain is missing)."""
    where = _store()
    if where is not None:
        if not path(name, where).is_file():
            pytest.fail(f"image {name!r} is not in {where}: python tests/gpu/_images.py {where}")
        return Image.open(path(name, where))
    try:
        built = build(name)
    except ToolchainError as exc:
        pytest.skip(f"image {name!r} needs a toolchain this machine lacks: {exc}")
    return Image.from_bytes(built.to_bytes(), f"<image {name}>")


if __name__ == "__main__":
    sys.path.insert(1, str(HERE.parent))  # the helpers in tests/ that pytest puts on the path
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for key in sys.argv[2:] or BUILDERS:
        built = build(key)
        print(f"{built.save(path(key, target))}: {built!r}")
