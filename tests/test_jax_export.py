"""Programs with bridged ops leave the process: jax.export and JAX's persistent compilation cache.

The handler's attributes name the image by its content hash (no address), so a program exported
here runs in a fresh process that has the image, and a second process finds the first one's
compiled executable in the cache.  The fresh processes run tests/_jax_processes.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")
pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers (ptxbridge[jax])")

import _jax_processes as child
import jax.numpy as jnp
from jax import export

import ptxbridge
import ptxbridge.jax as pj
from ptxbridge.jax.xla_ffi import TARGET, image_key

CPP = r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
CHECKS = [export.DisabledSafetyCheck.custom_call(TARGET)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    from ptxbridge import nvrtc

    folder = tmp_path_factory.mktemp("exported")
    ptxbridge.link([nvrtc.compile(CPP)]).save(folder / "image.ptxb")
    return folder


def run_child(*args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, str(Path(child.__file__)), *args], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_the_attributes_name_the_image_by_its_content(saved):
    image = ptxbridge.Image.open(saved / "image.ptxb")
    a, b = child.inputs()
    text = jax.jit(child.program(child.vadd_op(image))).lower(a, b).as_text()
    (call,) = [line for line in text.splitlines() if f"custom_call @{TARGET}" in line]
    assert f'image = "{image_key(image)}"' in call and 'kernel = "vadd"' in call
    for address in ("entry", "function", "describe", "session"):
        assert f"{address} = " not in call
    assert image_key(ptxbridge.Image.from_bytes(image.to_bytes())) == image_key(image)


def test_an_exported_program_runs_in_a_fresh_process_that_has_the_image(saved):
    image = ptxbridge.Image.open(saved / "image.ptxb")
    spec = jax.ShapeDtypeStruct((child.N,), jnp.float32)
    found = export.export(jax.jit(child.program(child.vadd_op(image))), disabled_checks=CHECKS)(spec, spec)
    (saved / "program.bin").write_bytes(found.serialize())
    a, b = child.inputs()
    np.testing.assert_allclose(found.call(a, b), np.sin(a + b), rtol=1e-6)  # here, too
    seen = run_child("exported", str(saved))
    assert "vadd: the program calls a kernel of image" in seen["unregistered"]
    assert "ptxbridge.jax.register_image(image)" in seen["unregistered"]
    assert seen["key"] == image_key(image)
    assert seen["right"]


def test_the_persistent_compilation_cache_hits_in_a_second_process(saved, tmp_path):
    first = run_child("cached", str(saved), str(tmp_path))
    second = run_child("cached", str(saved), str(tmp_path))
    assert first == {"right": True, "events": ["cache_misses"]}
    assert second == {"right": True, "events": ["cache_hits"]}


def test_register_image_takes_a_module_and_returns_the_hash(saved):
    image = ptxbridge.Image.open(saved / "image.ptxb")
    assert pj.register_image(image.load("cpu")) == image_key(image)
