"""cutile-rs JIT cache entries made as cutile-rs makes them (``cutile-compiler/src/jit_cache.rs``).

Tile IR bytecode (exported by cuda.tile), tileiras run on it with ``--gpu-name`` and
``--opt-level`` (as ``run_tileiras`` does), the cubin wrapped in the ``CUTILECUBIN`` header
with the GPU name, opt level and ``tileiras --version`` (``tileiras_fingerprint``), stored
as ``<key[:2]>/<key>.cubin``.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
from pathlib import Path

import cuda.tile as ct
from _toolchain import tool
from cuda.tile import compilation as tc

from ptxbridge.abi.cutile_cache import CutileCacheEntry, write_cache_entry


@ct.kernel
def vadd(a, b, c, tile: ct.Constant[int]):
    bid = ct.bid(0)
    ct.store(c, index=(bid,), tile=ct.load(a, index=(bid,), shape=(tile,)) + ct.load(b, index=(bid,),
                                                                                     shape=(tile,)))


ARRAY = tc.ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                           may_alias_internally=False)
VADD = tc.KernelSignature([ARRAY] * 3 + [128], tc.CallingConvention.cutile_python_v1())


def cache_entry(folder: Path, gpu: str = "sm_90", opt_level: int = 3) -> Path:
    """A cutile-rs JIT cache entry for ``vadd``, made as cutile-rs makes one; returns its path."""
    bytecode = io.BytesIO()
    tc.export_kernel(vadd, [VADD], bytecode, gpu_code=gpu, output_format="tileir_bytecode")
    tileiras = tool("tileiras")
    (folder / "k.bc").write_bytes(bytecode.getvalue())
    subprocess.run([tileiras, "--gpu-name", gpu, "--opt-level", str(opt_level), "-o", str(folder / "k.cubin"),
                    str(folder / "k.bc")], check=True, capture_output=True)
    version = subprocess.run([tileiras, "--version"], check=True, capture_output=True, text=True)
    fingerprint = version.stdout.strip()  # what cutile-rs's tileiras_fingerprint() records
    entry = CutileCacheEntry(gpu, fingerprint, opt_level, hashlib.sha256(bytecode.getvalue()).digest(),
                             (folder / "k.cubin").read_bytes())
    key = hashlib.sha256(b"cutile-jit-cubin-v1\0" + bytecode.getvalue() + gpu.encode()).hexdigest()
    path = folder / key[:2] / f"{key}.cubin"
    path.parent.mkdir()
    path.write_bytes(write_cache_entry(entry))
    return path

