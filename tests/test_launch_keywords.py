"""How a launch is spelled: parameters by position or by name, the launch keywords, and the error for
every other spelling, naming the kernel and showing the expected call; inspect.signature and help.

Kernels are CUDA C++ compiled by NVRTC and run on the CPU loader, through the C launcher where it is
built and through the pure-Python path (a subprocess without the extension) alike.
"""

from __future__ import annotations

import inspect
import pydoc
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import ArgumentError

SOURCE = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
FILL = r"""extern "C" __global__ void fill(float* x, float grid) { x[threadIdx.x] = grid; }"""
USAGE = "call it as saxpy(a, x, y, n, grid=..., block=...)"


@pytest.fixture(scope="module")
def module():
    return ptxbridge.load([nvrtc.compile(SOURCE, arch="sm_90")], device="cpu")


def _arrays(module, n=8):
    return module.to_device(np.arange(n, dtype=np.float32)), module.to_device(np.ones(n, np.float32))


def test_arguments_go_by_position_or_by_name(module):
    x, y = _arrays(module)
    module.saxpy(2.0, x, y, 8, grid=1, block=8)
    module.saxpy(a=2.0, x=x, y=y, n=8, grid=1, block=8)
    module.saxpy(2.0, x, n=8, y=y, grid=1, block=8)
    np.testing.assert_array_equal(module.to_host(y), 1 + 3 * 2.0 * np.arange(8))


CASES = [
    ("saxpy(2.0, x, y, 8, block=8)", f"saxpy: grid= is required; {USAGE}"),
    ("saxpy(2.0, x, y, 8, 1, 8)", "saxpy: grid= is required, as a keyword (got 6 positional arguments for 4 "
                                  f"parameters: grid and block go by keyword); {USAGE}"),
    ("saxpy(2.0, x, y, 8, grid=1, blocks=8)", "saxpy: unexpected keyword argument 'blocks' (did you mean "
                                              f"block=?); {USAGE}"),
    ("saxpy(2.0, x, y, 8, grid=1, block=8, strem=0)", "saxpy: unexpected keyword argument 'strem' (did you "
                                                      f"mean stream=?); {USAGE}"),
    ("saxpy(2.0, x, y, 8, grid=1, block=8, colour=1)",
     f"saxpy: unexpected keyword argument 'colour'; {USAGE}"),
    ("saxpy(2.0, x, y, a=3.0, grid=1, block=8)", "saxpy: argument 'a' given twice, by position (#1) and by "
                                                 f"name; {USAGE}"),
    ("saxpy(2.0, x=x, grid=1, block=8)", f"saxpy: missing arguments 'y', 'n'; {USAGE}"),
    ("saxpy(2.0, x, y, 8, 9, n=8, grid=1, block=8)",
     f"saxpy: got 5 positional arguments for 4 parameters, and 'n' by name; {USAGE}"),
    ("saxpy(2.0, x, y, grid=1, block=8)", "saxpy: takes 4 arguments (a, x, y, n) (got 3)"),
    ("saxpy(2.0, x, y, 8, grid=1)", "saxpy: block= is required (the kernel declares no .reqntid)"),
]


@pytest.mark.parametrize(("call", "message"), CASES)
def test_every_other_spelling_names_the_kernel_and_the_expected_call(module, call, message):
    x, y = _arrays(module)
    with pytest.raises(ArgumentError) as info:
        eval(f"module.{call}", {"module": module, "x": x, "y": y})
    assert str(info.value) == message


def test_the_pure_python_path_gives_the_same_errors_and_accepts_names(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.modules["ptxbridge.launch._fastlaunch"] = None  # as on a machine that could not build it
        import numpy as np, ptxbridge
        from ptxbridge import nvrtc
        module = ptxbridge.load([nvrtc.compile({SOURCE!r}, arch="sm_90")], device="cpu")
        assert type(module.saxpy).__mro__[1] is object
        x = module.to_device(np.arange(8, dtype=np.float32)); y = module.to_device(np.ones(8, np.float32))
        module.saxpy(n=8, y=y, x=x, a=2.0, grid=1, block=8)
        assert (module.to_host(y) == 1 + 2 * np.arange(8)).all()
        for call in {[call for call, _ in CASES]!r}:
            try:
                eval("module." + call)
            except ptxbridge.ArgumentError as exc:
                print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [message for _, message in CASES]


def test_inspect_signature_and_help_show_the_kernels_parameters(module):
    assert str(inspect.signature(module.saxpy)) == (
        "(a: 'f32', x: '*const f32', y: '*mut f32', n: 'i32', *, grid, block, shared_mem=0, stream=None, "
        "check_aliasing=True) -> None")
    text = pydoc.render_doc(module.saxpy, renderer=pydoc.plaintext)
    assert "    #[convention(c)] kernel saxpy(a: f32, x: *const f32, y: *mut f32, n: i32)\n" in text
    assert "    Launch: saxpy(a, x, y, n, grid=..., block=...)\n" in text
    assert "block is required (the kernel declares no .reqntid)" in text
    assert "One kernel of a loaded module" in type(module.saxpy).__doc__  # the class keeps its own
    constructor = "(module: 'Module', name: 'str', signature: 'Signature')"
    assert str(inspect.signature(ptxbridge.Kernel)) == constructor


def test_a_parameter_named_like_a_launch_keyword_goes_by_position_and_reqntid_is_the_default_block():
    # NVRTC's PTX with a .reqntid directive added (CUDA C++ has no attribute for it), given as PTX text
    plain = nvrtc.compile(FILL, arch="sm_90").code.decode()
    ptx = re.sub(r"(\.entry fill\([^)]*\))", r"\1\n.reqntid 64", plain)
    artifact = ptxbridge.Artifact.from_file(ptx, "#[reqntid(64)] kernel fill(x: *mut f32, grid: f32)")
    module = ptxbridge.load([artifact], device="cpu")
    assert str(inspect.signature(module.fill)) == (
        "(x: '*mut f32', _1: 'f32', /, *, grid, block=None, shared_mem=0, stream=None, check_aliasing=True) "
        "-> None")
    assert "Launch: fill(x, grid, grid=..., [block=...])\nArguments go by position or by parameter name " \
           "(grid: by position only)" in module.fill.__doc__
    assert "block defaults to the kernel's .reqntid" in module.fill.__doc__
    x = module.to_device(np.zeros(64, np.float32))
    module.fill(x, 2.5, grid=1)
    np.testing.assert_array_equal(module.to_host(x), np.full(64, 2.5, np.float32))
    with pytest.raises(ArgumentError) as info:
        module.fill(x=x, grid=1)
    assert str(info.value) == "fill: missing argument 'grid'; call it as fill(x, grid, grid=..., [block=...])"


def test_the_help_title_line_is_whole_words():
    """help(kernel)'s title line is pydoc's repr, cut to 100 characters in the middle of a word
    (``kernel add_ve...2, out: ...``): a long signature's repr is the name and whole parameter names."""
    source = ('extern "C" __global__ void add_vectors_with_a_long_name(const float* __restrict__ x, '
              "const float* __restrict__ y, float* out, int n, float alpha, double beta) {}")
    kernel = ptxbridge.load([nvrtc.compile(source)], device="cpu").add_vectors_with_a_long_name
    title = pydoc.render_doc(kernel, renderer=pydoc.plaintext).splitlines()[2]
    expected = "<ptxbridge kernel add_vectors_with_a_long_name(x, y, out, n, alpha, beta)>"
    assert title == repr(kernel) == expected
    assert repr(module_of(SOURCE).saxpy) == (
        "<ptxbridge kernel #[convention(c)] kernel saxpy(a: f32, x: *const f32, y: *mut f32, n: i32)>")


def module_of(source: str) -> ptxbridge.Module:
    return ptxbridge.load([nvrtc.compile(source)], device="cpu")
