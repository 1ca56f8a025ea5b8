"""Images for several targets on a GPU, and cuda-oxide's opaque-pointer NVVM IR (text and bitcode)
below sm_100.

An image whose cubins are all for other archs runs through the driver's JIT of its PTX when the
driver reads that PTX's ISA, and is refused otherwise (which of the two is decided from the
driver's version, as the loader decides it: tests/test_multi_target.py has the table); an image
with a cubin for the GPU loads that cubin, no JIT.  Built by tests/gpu/_images.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _images import ARCH, image

from ptxbridge.abi.errors import CudaError
from ptxbridge.abi.targets import max_ptx_isa
from ptxbridge.loaders import ptx_facts
from ptxbridge.loaders.driver import device_arch, driver_version

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def scale_shift(module, n: int = 5000) -> None:
    x = torch.randn(n, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    module.scale_shift(x, y, 1.5, n, grid=(n + 255) // 256, block=256)
    torch.testing.assert_close(y, 1.5 * x + 1.0)


def test_an_sm80_sm100_image_on_sm90_is_jit_compiled_or_refused_with_the_rebuild():
    if device_arch(0) != "sm_90":
        pytest.skip(f"the case is an sm_90 GPU (this one is {device_arch(0)})")
    shipped = image("targets_80_100")
    assert list(shipped.cubins) == ["sm_80", "sm_100"]
    facts, cuda = ptx_facts(shipped), driver_version()
    assert facts is not None and facts.target == "sm_80"
    if facts.isa <= max_ptx_isa(cuda):
        with shipped.load(0) as module:
            assert module.backend.loaded == "its PTX for sm_80, JIT-compiled by the driver"
            scale_shift(module)
        return
    with pytest.raises(CudaError) as info:
        shipped.load(0)
    reads = max_ptx_isa(cuda)
    assert str(info.value) == (
        "cuda:0 is sm_90 but the image's cubins are built for sm_80, sm_100, none of which it can run, and "
        f"its PTX (ISA {facts.isa[0]}.{facts.isa[1]}) is newer than this driver JIT-compiles (CUDA "
        f"{cuda[0]}.{cuda[1]} reads PTX ISA up to {reads[0]}.{reads[1]}); rebuild the image for sm_90: "
        "ptxbridge.link(..., arch=['sm_80', 'sm_100', 'sm_90']) or `ptxbridge link ... --arch "
        "sm_80,sm_100,sm_90 -o FILE`")
    assert info.value.code == "CUDA_ERROR_NO_BINARY_FOR_GPU"


def test_an_image_with_the_gpus_cubin_loads_it_without_jit():
    shipped = image("targets_80_90_100")
    here = device_arch(0)
    if here not in shipped.cubins:
        pytest.skip(f"the image has no cubin for {here}")
    with shipped.load(0) as module:
        assert module.backend.loaded == f"the cubin for {here}"
        scale_shift(module)


def test_an_arch_specific_cubin_loads_on_its_gpu_without_jit():
    """An image for sm_90a and sm_100 (the plain target's cubin first, its PTX the sm_80 input's):
    an sm_90 GPU runs the sm_90a cubin, of its own compute capability, no JIT."""
    shipped = image("targets_90a_100")
    assert list(shipped.cubins) == ["sm_100", "sm_90a"] and ptx_facts(shipped).target == "sm_80"
    if device_arch(0) != "sm_90":
        pytest.skip(f"the case is an sm_90 GPU (this one is {device_arch(0)})")
    with shipped.load(0) as module:
        assert module.backend.loaded == "the cubin for sm_90a"
        scale_shift(module)


def softplus_powscale(shipped) -> None:
    """opaque.rs's kernels of ``shipped`` on the GPU against the CPU loader and NumPy."""
    assert shipped.arch == ARCH and set(shipped.kernels) == {"softplus", "powscale"}
    if device_arch(0) != ARCH:
        pytest.skip(f"the image is for {ARCH} (this GPU is {device_arch(0)})")
    x = np.linspace(-4, 4, 3000, dtype=np.float32)
    with shipped.load(0) as module:
        xs = torch.from_numpy(x).cuda()
        soft, power = (torch.full_like(xs, float("nan")) for _ in range(2))
        module.softplus(xs, soft, grid=24, block=128)
        module.powscale(xs.abs(), power, np.float32(1.7), 0.25, grid=12, block=256)
        soft, power = soft.cpu().numpy(), power.cpu().numpy()
    cpu = shipped.load("cpu")
    soft_cpu, power_cpu = np.full_like(x, np.nan), np.full_like(x, np.nan)
    cpu.softplus(x, soft_cpu, grid=24, block=128)
    cpu.powscale(np.abs(x), power_cpu, np.float32(1.7), 0.25, grid=12, block=256)
    np.testing.assert_allclose(soft, soft_cpu, rtol=2e-6, atol=1e-7)  # libdevice's ex2.approx: ulps
    np.testing.assert_allclose(power, power_cpu, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(soft, np.log1p(np.exp(x)), rtol=3e-6, atol=1e-7)


def test_cuda_oxide_opaque_nvvm_ir_with_libdevice_runs_for_sm90():
    softplus_powscale(image("oxide_nvvm"))


def test_cuda_oxide_bitcode_bundle_runs_for_sm90():
    """The same IR as bitcode in an .oxart bundle: read as text and rewritten on the CPU machine."""
    softplus_powscale(image("oxide_bitcode"))
