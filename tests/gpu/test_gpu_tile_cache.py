"""cutile-rs artifacts on a GPU: a JIT cache entry runs, and a broken specialisation never launches.

The twin of tests/test_cutile_cache.py, from saved images (``_images.py``): ``tile_cache`` holds a
cutile-rs JIT cache entry made by tileiras for sm_90 and read by ``tile.load``; ``tile_promises``
the cutile-rs-shaped kernel, an NVRTC cubin whose signature states its promises.  The promises
reach the launch only through the image format, so this GPU needs neither cuda.tile nor tileiras.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from _images import image

from ptxbridge.abi.errors import ArgumentError

pytestmark = pytest.mark.gpu


def test_cache_entry_for_sm_90_runs():
    built = image("tile_cache")
    (name,) = built.kernels
    n = 128 * 8
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.full((n,), float("nan"), device="cuda")
    with built.load(0) as module:
        module[name](a, b, c, 128, grid=8)  # the tile constant, checked against the one compiled in
        torch.testing.assert_close(c, a + b)


def test_kept_and_broken_promises_on_the_gpu():
    with image("tile_promises").load(0) as module:
        x = torch.arange(32 * 48, dtype=torch.float32, device="cuda").reshape(32, 48)
        y = torch.zeros_like(x)
        module.add_entry(x, (y, (16, 16), (48, 1)), grid=(2, 3))
        torch.testing.assert_close(y, x + 1)
        bad = torch.zeros(32, 40, device="cuda")
        out = torch.full((32, 32), float("nan"), device="cuda")
        with pytest.raises(ArgumentError, match=r"argument 'x' .* dim 1 must be divisible by 16"):
            module.add_entry(bad, (out, (16, 16), (32, 1)), grid=(2, 2))
        torch.cuda.synchronize()
        assert torch.isnan(out).all()  # refused before the launch: nothing was written
