"""ptxbridge.cli: the ``ptxbridge`` command (``main``), with ``inspect``, ``link``, ``doctor`` and ``cache``.

``inspect`` reads any artifact, source or saved image into a report that ``report`` formats as text;
``link`` links files into a saved image; ``doctor`` lists the driver, the GPUs and each toolchain with
install hints.
"""

from .main import main

__all__ = ["main"]
