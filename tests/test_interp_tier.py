"""The interpreter stays covered now that the compiled tier is the CPU loader's default.

The CPU loader's suites of real kernels (CUDA C++ samples through NVRTC, numba-cuda's kernels),
of PTX semantics, of memory reports and the differential cases run again in a fresh pytest with
``PTXBRIDGE_CPU_TIER=interp``, so every kernel they launch is interpreted as it was before the
compiled tier existed; tests/test_cpu_tier.py compares the two tiers bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = (
    "tests/test_emulator_semantics.py",
    "tests/test_emulator_kernels.py",
    "tests/test_real_kernels_cuda.py",
    "tests/test_real_kernels_numba.py",
    "tests/test_cpu_sanitizer.py",
    "tests/test_differential.py",
)


def test_the_cpu_suites_pass_on_the_interpreter():
    env = {**os.environ, "PTXBRIDGE_CPU_TIER": "interp"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1]
