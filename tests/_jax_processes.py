"""Run by tests/test_jax_export.py as a fresh process: a saved image and what JAX made of it earlier.

``python tests/_jax_processes.py exported DIR``: deserializes DIR/program.bin (a ``jax.export`` of a
program with a bridged op), runs it before and after registering DIR/image.ptxb, prints what it saw.
``python tests/_jax_processes.py cached DIR CACHE``: jits the same program with JAX's persistent
compilation cache in CACHE and prints the cache events and whether the result is right.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import ptxbridge
import ptxbridge.jax as pj

N = 300


def vadd_op(image: ptxbridge.Image):
    return pj.op(image, "vadd", outputs={"c": "like a"}, derived={"n": "numel a"},
                 grid=lambda n: -(-n // 128), block=128)


def program(vadd):
    return lambda a, b: jnp.sin(vadd(a, b))


def inputs() -> tuple[np.ndarray, np.ndarray]:
    return np.arange(N, dtype=np.float32), np.linspace(-1, 1, N, dtype=np.float32)


def exported(folder: Path) -> dict:
    from jax import export

    found = export.deserialize((folder / "program.bin").read_bytes())
    a, b = inputs()
    seen = {}
    pj.xla_ffi.register()  # the handler, but not the image yet
    try:
        found.call(a, b)
        seen["unregistered"] = "ran"
    except Exception as exc:
        seen["unregistered"] = str(exc)
    seen["key"] = pj.register_image(ptxbridge.Image.open(folder / "image.ptxb"))
    seen["right"] = bool(np.allclose(found.call(a, b), np.sin(a + b), rtol=1e-6))
    return seen


def cached(folder: Path, cache: Path) -> dict:
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    events = []
    jax.monitoring.register_event_listener(lambda name, **_: events.append(name))
    a, b = inputs()
    found = jax.jit(program(vadd_op(ptxbridge.Image.open(folder / "image.ptxb"))))(a, b)
    return {"right": bool(np.allclose(found, np.sin(a + b), rtol=1e-6)),
            "events": [e.rsplit("/", 1)[-1] for e in events if e.startswith("/jax/compilation_cache/cache_")]}


if __name__ == "__main__":
    mode, folder, *rest = sys.argv[1:]
    result = exported(Path(folder)) if mode == "exported" else cached(Path(folder), Path(rest[0]))
    print(json.dumps(result))
