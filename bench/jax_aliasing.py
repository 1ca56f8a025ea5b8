"""The XLA FFI handler's no-alias check under jax.jit on a GPU: on against off (check_aliasing=False).

One jitted program chains 100 launches of ``raxpy`` (CUDA C++, ``__restrict__`` x and y, 1024
elements; the GPU suite's ``cpp`` image, tests/gpu/_images.py).  Rounds alternate check on and
off; each round runs the program 50 times.  Prints the median and minimum microseconds per
launch.  With XLA's command buffers (the default) the handler runs only when XLA records the
program, so a replay costs the same either way; ``XLA_FLAGS=--xla_gpu_enable_command_buffer=``
makes the handler (and the check) run on every launch.
Usage: ``python bench/jax_aliasing.py`` on a machine with a GPU, JAX and the built handler.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import ptxbridge.jax as pj

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "gpu"))
from _images import image

LAUNCHES, CALLS, ROUNDS, N = 100, 50, 15, 1024


def chain(op: pj.JaxOp):
    def run(x, y):
        for _ in range(LAUNCHES):
            y = op(1.0001, x, y)
        return y

    return jax.jit(run, donate_argnums=1)


def main() -> None:
    cpp = image("cpp")
    programs = {checked: chain(pj.op(cpp, "raxpy", derived={"n": "numel x"}, grid=lambda n: -(-n // 256),
                                     block=256, check_aliasing=checked)) for checked in (True, False)}
    x = jnp.ones(N, jnp.float32)
    for checked, program in programs.items():
        assert ("no_alias" in program.lower(x, x).as_text()) is checked
        program(x, jnp.zeros(N, jnp.float32)).block_until_ready()  # compile, record
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(ROUNDS):
        for checked, program in programs.items():
            y = jnp.zeros(N, jnp.float32)
            start = time.perf_counter()
            for _ in range(CALLS):
                y = program(x, y)
            y.block_until_ready()
            times[checked].append((time.perf_counter() - start) / (CALLS * LAUNCHES) * 1e6)
    for checked, found in times.items():
        print(f"check {'on' if checked else 'off'}: {statistics.median(found):.3f} us per launch (median of "
              f"{ROUNDS} rounds), min {min(found):.3f}")
    same = [np.asarray(p(x, jnp.zeros(N, jnp.float32))) for p in programs.values()]
    np.testing.assert_array_equal(*same)


if __name__ == "__main__":
    main()
