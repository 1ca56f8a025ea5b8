"""cuda-oxide NVVM IR on a GPU: the same images tests/test_oxide_payloads.py runs on the CPU loader.

NVVM IR with libdevice calls goes through libNVVM and nvJitLink for the GPU's arch; the
GPU's results must agree with the CPU loader's interpretation of the same link to a few ulps
(libdevice's ``expf`` uses ``ex2.approx.ftz.f32``, which the CPU loader computes exactly and
the GPU's special-function unit to within 2 ulps), and a no-FMA bundle must give bit for bit
what an explicit ``fma=0`` link of the same NVVM IR gives on the GPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ptxbridge
import ptxbridge.nvrtc
import ptxbridge.oxide as ox
from ptxbridge.abi.errors import ToolchainError
from ptxbridge.abi.oxart import (
    EntryKind,
    OxartBundle,
    OxartEntry,
    OxartOptions,
    OxartPayload,
    PayloadKind,
    write_oxart,
)
from ptxbridge.artifacts.artifact import artifact_from_bytes
from ptxbridge.linker import LinkOptions
from ptxbridge.linker.target import device_arch
from ptxbridge.nvvm import compile_to_ltoir

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
OXIDE = Path(__file__).parents[1] / "rust" / "oxide"
LIBM_RS, LIBM_LL = OXIDE / "libm.rs", OXIDE / "libm.ll"


def libm(tmp_path: Path, options: OxartOptions) -> ptxbridge.Artifact:
    """libm.ll in an .oxart bundle for sm_80 with ``options``, loaded (skips without libNVVM)."""
    payload = OxartPayload(PayloadKind.NVVM_IR, "libm.ll", LIBM_LL.read_bytes())
    entries = tuple(OxartEntry(EntryKind.KERNEL, k) for k in ("biased", "polar", "wave"))
    bundle = OxartBundle("libm", "sm_80", (payload,), entries, options)
    path = tmp_path / "app"
    path.write_bytes(write_oxart([bundle]))
    try:
        return ox.load(path, LIBM_RS)
    except ToolchainError as exc:
        pytest.skip(str(exc))


def wave(module, x: np.ndarray, on_gpu: bool) -> np.ndarray:
    if on_gpu:
        xs, ys = torch.from_numpy(x).cuda(), torch.full(x.shape, float("nan"), device="cuda")
    else:
        xs, ys = x, np.full_like(x, np.nan)
    module.wave(xs, ys, np.float32(1.3), np.float32(0.7), grid=(x.size + 127) // 128, block=128)
    return ys.cpu().numpy() if on_gpu else ys


@pytest.mark.parametrize("no_fma", [True, False])
def test_nvvm_ir_with_libdevice_matches_the_cpu_loader(tmp_path, no_fma):
    image = ptxbridge.link([libm(tmp_path, OxartOptions(no_fma=no_fma))], arch=device_arch(0))
    x = np.linspace(-3, 3, 8192, dtype=np.float32)
    with image.load(0) as gpu:
        y_gpu = wave(gpu, x, True)
    y_cpu = wave(image.load("cpu"), x, False)
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-6, atol=1e-7)
    if no_fma:
        options = OxartOptions(no_fma=True)
        lto = compile_to_ltoir(LIBM_LL.read_bytes(), "libm", "sm_80", options)
        art = artifact_from_bytes(lto, image.kernels.values(), source="explicit", name="explicit")
        explicit = ptxbridge.link([art], arch=device_arch(0), options=LinkOptions(fma=False))
        with explicit.load(0) as gpu:
            y_explicit = wave(gpu, x, True)
        np.testing.assert_array_equal(y_gpu.view(np.uint32), y_explicit.view(np.uint32))
    np.testing.assert_allclose(y_gpu, (np.float32(1.3) * np.sin(x) + np.exp(x)) * np.float32(0.7), rtol=2e-6,
                               atol=2e-7)


def test_cuda_oxide_device_function_called_from_cpp_on_the_gpu(tmp_path):
    user = ptxbridge.nvrtc.compile(
        'extern "C" __device__ float affine(float slope, float offset, float x);\n'
        'extern "C" __global__ void use_affine(const float* x, float* y, unsigned n) {\n'
        "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) y[i] = affine(2.0f, 1.0f, x[i]);\n}\n",
        arch=device_arch(0), output="ltoir", name="user.cu")
    with ptxbridge.link([libm(tmp_path, OxartOptions()), user], arch=device_arch(0)).load(0) as module:
        x, y = torch.arange(256, dtype=torch.float32, device="cuda"), torch.zeros(256, device="cuda")
        module.use_affine(x, y, 256, grid=2, block=128)
        torch.testing.assert_close(y, 2 * x + 1)


def test_repr_align_parameters_reach_the_kernel(tmp_path):
    try:
        art = ox.load(OXIDE / "align.ll", OXIDE / "align.rs", arch="sm_80")
    except ToolchainError as exc:
        pytest.skip(str(exc))
    padded = np.zeros(4, np.float32)
    padded[0] = 5.0
    with ptxbridge.link([art], arch=device_arch(0)).load(0) as module:
        out = torch.zeros(64, device="cuda")
        module.aligned(3, {"x": 1.0, "y": 2.0, "z": 3.0, "w": 4.0}, padded.tobytes(), out, grid=1, block=64)
        torch.testing.assert_close(out, torch.full((64,), 18.0, device="cuda"))
