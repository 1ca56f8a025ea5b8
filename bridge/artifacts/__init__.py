"""ptxbridge.artifacts: what the steps hand each other.

:mod:`.artifact` (:class:`Artifact`, one frontend's code with its signatures; plain files typed as
artifacts) and :mod:`.image` (:class:`Image`, the linker's product, saved and opened as one file).
"""
