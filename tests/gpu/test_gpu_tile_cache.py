"""cutile-rs artifacts on a GPU: a JIT cache entry runs, and a broken specialisation never launches.

The twin of tests/test_cutile_cache.py: the cache entry is made for the GPU's own arch with
tileiras, and the cutile-rs-shaped kernel is an NVRTC cubin whose signature states its promises.
"""

from __future__ import annotations

import pytest

ct = pytest.importorskip("cuda.tile", reason="needs the tile extra (cuda-tile)")
torch = pytest.importorskip("torch")
from _cutile_cache import CUTILE_RS, PROMISED, cache_entry
from _toolchain import nvrtc_compile

import ptxbridge
import ptxbridge.tile as pt
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.linker.target import device_arch

pytestmark = pytest.mark.gpu


def test_cache_entry_for_this_gpu_runs(tmp_path):
    arch = device_arch(0).rstrip("af")
    art = pt.load(cache_entry(tmp_path, gpu=arch), gpu=arch)
    (name,) = art.kernels
    n = 128 * 8
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.full((n,), float("nan"), device="cuda")
    with ptxbridge.link([art]).load(0) as module:
        module[name](a, b, c, grid=8)
        torch.testing.assert_close(c, a + b)


def test_kept_and_broken_promises_on_the_gpu(tmp_path):
    path = tmp_path / "add.cubin"
    path.write_bytes(nvrtc_compile(CUTILE_RS, [f"-arch={device_arch(0)}"], "cubin"))
    with ptxbridge.link([pt.load(path, PROMISED)]).load(0) as module:
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
