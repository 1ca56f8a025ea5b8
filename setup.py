"""The optional C hot path (``ptxbridge.launch._fastlaunch``); everything else is in pyproject.toml.

``optional=True``: a machine without a C compiler or Python headers still installs, and the
pure-Python launch path is used there.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ptxbridge.launch._fastlaunch",
                             ["bridge/launch/_fastlaunch.c", "bridge/launch/_launcher.c"],
                             depends=["bridge/launch/_fastlaunch.h"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True)])
