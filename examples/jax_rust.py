"""A Rust kernel inside ``jax.jit``.

``kernels/scale.rs`` is plain rustc ``nvptx64`` code: ``saxpy(a: f32, x: *const f32, y: *mut f32,
n: u32)`` computes ``y = a * x + y``.  ``ptxbridge.jax.op`` makes it a JAX function: ``n`` is
derived from ``x`` ("numel x"), and since the kernel writes ``y`` the op returns the new ``y``,
with XLA told that it aliases the input (``input_output_aliases``), so the kernel writes in
place where XLA can give it the buffer.  Under ``jax.jit`` the call is one XLA FFI custom call:
on a GPU it launches on XLA's stream; on the CPU the same C handler runs the kernel on
ptxbridge's CPU loader.  The same kernel with ``y`` a zero-filled output (``y = a * x``)
is differentiable: its backward is the kernel again (``a * grad``), so ``jax.grad`` works under
``jax.jit``.
Usage: ``python examples/jax_rust.py`` (needs JAX; exits cleanly without it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ptxbridge
import ptxbridge.rust

HERE = Path(__file__).parent


def main() -> None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax_rust: JAX is not installed, nothing to run (pip install jax, then run again)")
        return
    from ptxbridge.jax import op

    rust = ptxbridge.rust.compile(HERE / "kernels" / "scale.rs")
    print(f"Rust kernel: {rust.kernels['saxpy']}")
    image = ptxbridge.link([rust])
    geometry = {"derived": {"n": "numel x"}, "grid": lambda n: -(-n // 256), "block": 256}
    saxpy = op(image, "saxpy", **geometry)
    scale = op(image, "saxpy", outputs={"y": "zeros like x"}, **geometry,
               backward=lambda grad, a, x, y: {"x": scale(a, grad)})

    @jax.jit
    def step(x, y):
        return jnp.tanh(saxpy(2.0, x, y))  # JAX ops and the Rust kernel in one XLA program

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(4096, dtype=np.float32) for _ in range(2))
    result = step(x, y)
    np.testing.assert_allclose(np.asarray(result), np.tanh(2.0 * x + y), rtol=1e-5, atol=1e-6)
    platform = jax.default_backend()
    where = "" if platform != "cpu" else " (the XLA FFI handler runs ptxbridge's CPU loader)"
    print(f"jax.jit on {platform}{where}: matches NumPy")
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.tanh(scale(2.0, x)))))(x)
    np.testing.assert_allclose(np.asarray(grad), 2.0 * (1.0 - np.tanh(2.0 * x) ** 2), rtol=1e-5, atol=1e-6)
    print("jax.grad under jax.jit, its backward the Rust kernel again: matches NumPy")


if __name__ == "__main__":
    main()
