"""Helpers for tests that run one kernel on both tiers of the CPU loader and compare them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ptxbridge
from ptxbridge import nvrtc


def tiers(*artifacts: Any) -> tuple[Any, Any]:
    """The linked artifacts loaded on the compiled tier and on the interpreter."""
    image = ptxbridge.link(list(artifacts))
    return image.load("cpu", tier="compiled"), image.load("cpu", tier="interp")


def cuda_tiers(source: str) -> tuple[Any, Any]:
    """CUDA C++ compiled by NVRTC for sm_90, loaded on both tiers."""
    return tiers(nvrtc.compile(source, arch="sm_90", output="ptx"))


def both(
    pair: tuple[Any, Any], kernel: str, make: Callable[[], list[Any]], **launch_options: Any
) -> list[list[Any]]:
    """Launch ``kernel`` on each tier with fresh arrays from ``make()``; return both arrays lists
    (and check the compiled tier really compiled it, so a silent fallback cannot pass for a match)."""
    compiled, interpreted = pair
    results = []
    for module in (compiled, interpreted):
        arrays = make()
        getattr(module, kernel)(*arrays, **launch_options)
        results.append(arrays)
    why = compiled.backend.compiled_tier.why_interpreted(kernel)
    assert why is None, f"{kernel} runs on the interpreter: {why}"
    return results


def same(a: list[Any], b: list[Any]) -> None:
    """The arrays of two launches' arguments are equal bit for bit."""
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            assert x.tobytes() == y.tobytes()


def ptx_both(ptx: str, kinds: list[Any], inputs: list[np.ndarray], output: np.ndarray, **launch_options: Any
             ) -> np.ndarray:
    """Launch kernel ``k`` of hand-written ``ptx`` on each tier with pointers to ``inputs`` and to a fresh
    copy of ``output``; check the compiled tier compiled it and both outputs are equal bit for bit;
    return the compiled tier's."""
    from _emulator import backend, launch

    outs = []
    for tier in ("compiled", "interp"):
        be = backend(ptx, tier=tier)
        arrays = [*inputs, output.copy()]
        launch(be, "k", kinds, [a.ctypes.data for a in arrays], arrays=arrays, **launch_options)
        outs.append(arrays[-1])
        if tier == "compiled":
            why = be.compiled_tier.why_interpreted("k")
            assert why is None, f"k runs on the interpreter: {why}"
    assert outs[0].tobytes() == outs[1].tobytes()
    return outs[0]
