"""ptxbridge.cli: the ``ptxbridge`` command (``main``), with ``inspect``, ``doctor`` and ``cache``.

``inspect`` reads any artifact or source into a report that ``report`` formats as text; ``doctor``
lists the driver, the GPUs and each toolchain with install hints.
"""

from .main import main

__all__ = ["main"]
