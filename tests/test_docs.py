"""The Python examples in docs/ run as written and print what their comments say.

Every ```python block of docs/*.md is listed in ``BLOCKS`` (a new block fails
``test_every_block_is_classified`` until it is): run, run after a setup that
makes the names the block takes as given, or skipped with the reason.  A line
``expr   # <text>`` whose text is a signature (starts with ``#[``) or a plain
name is checked: ``str(expr)`` must equal it, with ``...`` matching anything.
"""

from __future__ import annotations

import re
import runpy
from collections.abc import Callable
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
CHECKED = re.compile(r"^(?P<expr>[\w.]+(?:\[[^\]]*\])?)\s+# (?P<want>#\[.*|[\w]+)$")


def blocks(doc: str, lang: str = "python") -> list[str]:
    """The code blocks tagged ``lang`` of ``docs/<doc>``, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / doc).read_text(), re.S)


def run_block(code: str, tmp_path: Path, namespace: dict | None = None) -> dict:
    """Run ``code`` from a file (cuTile reads kernel source) and check its commented results."""
    script = tmp_path / "block.py"
    script.write_text(code)
    found = runpy.run_path(str(script), init_globals=namespace or {})
    checked = 0
    for line in code.splitlines():
        if match := CHECKED.match(line):
            pattern = ".*".join(map(re.escape, match["want"].split("...")))
            got = str(eval(match["expr"], found))
            assert re.fullmatch(pattern, got), f"{match['expr']}: doc says {match['want']!r}, got {got!r}"
            checked += 1
    found["_checked"] = checked
    return found


# --- setups: the inputs a block takes as given, made by the real compilers -------------------------

CPP_SOURCE = r"""
extern "C" __device__ float my_add(float a, float b);
extern "C" __device__ float twice(float a) { return 2.0f * a; }
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = my_add(a * x[i], y[i]);
}
template <typename T> __global__ void scale(T* x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] = twice(x[i]) * a;
}
"""


def nvrtc_setup(tmp_path: Path) -> dict:
    return {"source": CPP_SOURCE}


def link_setup(tmp_path: Path) -> dict:
    """LTO-IR from NVRTC, numba PTX bytes, a numba device function and rustc PTX on disk."""
    pytest.importorskip("numba.cuda")
    import ptxbridge.numba
    import ptxbridge.rust
    from ptxbridge import nvrtc

    cpp = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'
    numba_src = tmp_path / "nb.py"
    numba_src.write_text("from numba import cuda\n\ndef square(x):\n"
                         "    i = cuda.grid(1)\n    x[i] = x[i] * x[i]\n")
    square = runpy.run_path(str(numba_src))["square"]
    rust = ptxbridge.rust.compile(DOCS.parent / "examples/kernels/scale.rs")
    (tmp_path / "rust.ptx").write_bytes(rust.code if isinstance(rust.code, bytes) else rust.code.encode())
    return {
        "cpp_ltoir": nvrtc.compile(cpp, arch="sm_90", output="ltoir"),
        "numba_ptx_bytes": ptxbridge.numba.compile(square, "void(float32[::1])", arch="sm_90").code,
        "device_fn": ptxbridge.numba.compile(lambda a, b: a * b + 1.0, "float32(float32, float32)",
                                             device=True, output="ltoir", name="nb_fma"),
    }


def manifest_setup(tmp_path: Path) -> dict:
    from ptxbridge.abi.syntax import parse_signatures

    sig1, sig2 = parse_signatures(blocks("manifest.md", "sig")[0])
    return {"sig1": sig1, "sig2": sig2}


def rust_setup(tmp_path: Path) -> dict:
    """The doc's own ``saxpy.rs`` block, written where the Python block looks for it."""
    (tmp_path / "saxpy.rs").write_text(blocks("rust.md", "rust")[0])
    return {}


def oxide_setup(tmp_path: Path) -> dict:
    """cuda-oxide's NVVM IR and its source: the fixtures tests/test_oxide_payloads.py uses."""
    pytest.importorskip("cuda.bindings.nvvm")
    return {"fixtures": str(Path(__file__).parent / "rust" / "oxide")}


def needs(module: str) -> Callable[[Path], dict]:
    def setup(tmp_path: Path) -> dict:
        pytest.importorskip(module)
        return {}
    return setup


def export_setup(tmp_path: Path) -> dict:
    """A folder for the saved image; jax.export's serialization needs flatbuffers."""
    pytest.importorskip("ptxbridge.jax._xla_ffi")
    pytest.importorskip("flatbuffers")
    return {"tmp": tmp_path}


GPU = "needs a GPU"
# (doc, block index) -> setup, or a skip reason.  Blocks of one doc share a namespace, in order.
BLOCKS: dict[tuple[str, int], Callable[[Path], dict] | str] = {
    ("frameworks.md", 0): needs("torch"),
    ("frameworks.md", 1): needs("torch"),
    ("frameworks.md", 2): needs("torch"),
    ("frameworks.md", 3): needs("ptxbridge.jax._xla_ffi"),
    ("frameworks.md", 4): needs("ptxbridge.jax._xla_ffi"),
    ("frameworks.md", 5): export_setup,
    ("frameworks.md", 6): needs("ptxbridge.jax._xla_ffi"),
    ("linking.md", 0): nvrtc_setup,
    ("linking.md", 1): lambda tmp_path: {},  # self-contained: C++ names on the CPU loader
    ("linking.md", 2): link_setup,
    ("linking.md", 3): GPU,
    ("image-format.md", 0): needs("cuda.bindings.nvrtc"),
    ("image-format.md", 1): needs("cuda.bindings.nvrtc"),  # an image for three targets
    ("manifest.md", 0): manifest_setup,
    ("numba.md", 0): needs("numba.cuda"),
    ("numba.md", 1): needs("numba.cuda"),
    ("numba.md", 2): needs("numba.cuda"),
    ("numba.md", 3): needs("numba.cuda"),
    ("numba.md", 4): needs("numba.cuda"),
    ("rust.md", 0): rust_setup,
    ("rust.md", 1): needs("numba.cuda"),
    ("rust.md", 2): oxide_setup,
    ("safety.md", 0): needs("cuda.bindings.nvrtc"),
    ("tile.md", 0): needs("cuda.tile"),
    ("tile.md", 1): "needs a cutile-rs cubin (tests/test_tile_frontend.py covers load)",
}


def test_every_block_is_classified() -> None:
    present = {(doc.name, i) for doc in DOCS.glob("*.md") for i in range(len(blocks(doc.name)))}
    assert present == set(BLOCKS)


@pytest.mark.parametrize("doc", sorted({doc for doc, _ in BLOCKS}))
def test_doc_blocks_run(doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBRIDGE_DEVICE", "cpu")
    namespace: dict = {}
    ran = 0
    for index, code in enumerate(blocks(doc)):
        how = BLOCKS[doc, index]
        if isinstance(how, str):
            continue
        namespace = run_block(code, tmp_path, {**namespace, **how(tmp_path)})
        ran += 1
    assert ran, f"{doc}: every block skipped"


def test_commented_results_are_checked() -> None:
    """The checker sees the lines it is meant to (a regex drift would silently check nothing)."""
    lines = [line for doc in ("numba.md", "rust.md", "tile.md") for code in blocks(doc)
             for line in code.splitlines() if CHECKED.match(line)]
    assert len(lines) >= 6, lines


def test_frameworks_md_on_which_slices_carry_their_length() -> None:
    """frameworks.md says slices pass their own length: plain rustc's ``&[T]`` is the slice kind too
    (its length from the tensor), as cuda-oxide's is."""
    from ptxbridge.abi.kinds import Slice
    from ptxbridge.abi.signature import Convention
    from ptxbridge.rust.types import TypeMapper, parse_type

    for convention in (Convention.C, Convention.OXIDE):
        assert isinstance(TypeMapper([], convention).kind(parse_type("&[f32]"), {}), Slice)
    text = " ".join((DOCS / "frameworks.md").read_text().split())
    assert ("Slices (`&[T]`, `DisjointSlice`; plain rustc's and cuda-oxide's alike) and numba arrays pass "
            "their own length to the kernel") in text


def test_doc_claims_the_code_backs() -> None:
    from ptxbridge import OptionError
    from ptxbridge.linker import LinkOptions, nvjitlink_args, ptx_isa_supported

    assert ptx_isa_supported(13000) == (9, 0)  # linking.md, PTX ISA
    assert "-ftz=1" in nvjitlink_args(LinkOptions(ftz=True), "sm_90", True)
    with pytest.raises(OptionError, match="only when linking with LTO"):
        nvjitlink_args(LinkOptions(ftz=True), "sm_90", False)

