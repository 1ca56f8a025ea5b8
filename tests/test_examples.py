"""Run every program in examples/ as a newcomer would, so CI keeps them working.

Each example is a subprocess of this interpreter, with CUDA_VISIBLE_DEVICES
empty so it takes the CPU loader even on a GPU machine; the test
checks the exit status and the line that says the result matched.  The
``gpu`` test runs them unforced and expects every step on the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _rust_fixtures import sysroot, toolchain  # noqa: F401  (session fixtures)

EXAMPLES = Path(__file__).parents[1] / "examples"
TIMEOUT_S = 300


def run(*argv: str, gpu: bool = False) -> str:
    """stdout of ``python *argv`` (examples/ as cwd's neighbour); fails with its output on a bad exit."""
    env = dict(os.environ)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # torch and the CUDA driver both see no GPU
    env.pop("PTXBRIDGE_DEVICE", None)
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT_S, cwd=EXAMPLES.parent)
    assert done.returncode == 0, f"{argv} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_quickstart_runs_on_the_cpu(sysroot):  # noqa: F811
    out = run(str(EXAMPLES / "quickstart.py"))
    assert "loaded on: cpu" in out
    assert "saxpy then square on 4096 floats: matches NumPy" in out


def test_rust_torch_runs_on_cpu_tensors(sysroot):  # noqa: F811
    pytest.importorskip("torch")
    out = run(str(EXAMPLES / "rust_torch.py"))
    assert "kernel affine(p: struct Affine { scale: f32, shift: f32 }, x: *const f32" in out
    assert "loaded on: cpu (ptxbridge's CPU loader" in out
    assert "affine twice on 10000 floats on cpu: matches torch" in out
    assert "a float64 tensor is refused: affine: argument 'x' (*const f32) got float64" in out


def test_rust_torch_without_torch_says_so_and_exits_0():
    # sys.modules["torch"] = None makes ``import torch`` raise ImportError, as if not installed.
    script = ("import runpy, sys; sys.modules['torch'] = None; "
              f"runpy.run_path({str(EXAMPLES / 'rust_torch.py')!r}, run_name='__main__')")
    out = run("-c", script)
    assert out.strip() == ("rust_torch: PyTorch is not installed, nothing to run "
                           "(pip install torch, then run again)")


def test_pipeline_runs_three_languages_on_the_cpu_and_says_the_cutile_step_was_replaced(sysroot):  # noqa: F811
    pytest.importorskip("cuda.tile")
    out = run(str(EXAMPLES / "pipeline.py"))
    assert "cubin: #[convention(cutile)] #[reqntid(128)] kernel tile_add(" in out
    assert "loaded on: cpu" in out
    assert "cuTile step skipped: a tileiras cubin runs only on an sm_90 GPU" in out
    assert "(C++, Rust, numba (cuTile step by NumPy)) on cpu: matches NumPy" in out


def test_torch_compile_model_mixes_three_languages_on_cpu_tensors(sysroot):  # noqa: F811
    pytest.importorskip("torch")
    out = run(str(EXAMPLES / "torch_compile.py"))
    assert "-> torch op example::saxpy(float a, Tensor x, Tensor(a2!) y) -> ()" in out
    assert "eager on cpu (ptxbridge's CPU loader; torch sees no CUDA GPU): matches" in out
    assert "torch._dynamo.explain: 0 graph breaks" in out
    assert "torch.compile(fullgraph=True, backend='aot_eager') on cpu: matches eager" in out


def test_jax_rust_runs_under_jit_on_the_cpu(sysroot):  # noqa: F811
    pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built")
    out = run(str(EXAMPLES / "jax_rust.py"))
    assert "jax.jit on cpu (the XLA FFI handler runs ptxbridge's CPU loader): matches NumPy" in out
    assert "jax.grad under jax.jit, its backward the Rust kernel again: matches NumPy" in out


@pytest.mark.gpu
def test_framework_examples_run_on_the_gpu(sysroot):  # noqa: F811
    pytest.importorskip("torch")
    pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built")
    compiled = run(str(EXAMPLES / "torch_compile.py"), gpu=True)
    settings = "backend='inductor', mode='reduce-overhead'"
    assert f"torch.compile(fullgraph=True, {settings}) on cuda:0: matches eager" in compiled
    assert "jax.jit on gpu: matches NumPy" in run(str(EXAMPLES / "jax_rust.py"), gpu=True)


@pytest.mark.gpu
def test_examples_run_every_step_on_the_gpu(sysroot):  # noqa: F811
    pytest.importorskip("torch")
    pipeline = run(str(EXAMPLES / "pipeline.py"), gpu=True)
    assert "pipeline on 64x1024 floats (C++, Rust, numba, cuTile) on cuda:0: matches NumPy" in pipeline
    rust_torch = run(str(EXAMPLES / "rust_torch.py"), gpu=True)
    assert "affine twice on 10000 floats on cuda:0: matches torch" in rust_torch
    assert "loaded on: cuda:0" in run(str(EXAMPLES / "quickstart.py"), gpu=True)
