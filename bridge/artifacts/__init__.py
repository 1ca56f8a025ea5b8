"""ptxbridge.artifacts: what the steps hand each other.

:mod:`.artifact` (:class:`Artifact`: one frontend's code with its signatures, and plain code files
read as artifacts), :mod:`.signatures` (the signatures a code object is given, checked against, or
shows by itself) and :mod:`.image` (:class:`Image`, the linker's product, saved and opened as one file).
"""
