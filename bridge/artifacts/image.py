"""A linked image: one device code object plus every kernel's signature; saved and opened as one file.

:meth:`Image.save` / :meth:`Image.open` ship an image to a machine without the toolchains that
built it (a GPU server, a container): the file holds the cubin, the signatures, the arch and the
PTX the CPU loader interprets, with a checksum (format: ``docs/image-format.md``).
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, FormatError, LinkError
from ptxbridge.abi.image_file import ImageFile, read_image_file, write_image_file
from ptxbridge.abi.signature import Signature
from ptxbridge.artifacts.artifact import describe_code
from ptxbridge.artifacts.signatures import with_cubin_facts
from ptxbridge.launch.module import Module
from ptxbridge.launch.raised import RaisedException
from ptxbridge.loaders import open_backend

__all__ = ["Image"]

_MAX_FILE = 1 << 31  # as ptxbridge.artifacts.artifact: nothing larger is read into memory


def _created_by() -> str:
    try:
        return f"ptxbridge {importlib.metadata.version('ptxbridge')}"
    except importlib.metadata.PackageNotFoundError:  # run from a source folder, not installed
        return "ptxbridge"



def _umask() -> int:
    """The process's umask (read by setting it, then set back: POSIX has no way to only read it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass(frozen=True, slots=True, repr=False)
class Image:
    """What ``ptxbridge.link`` returns.

    ``cubin`` is the linked machine code for ``arch`` (None when only the CPU
    loader will run it); ``cubins`` maps every target the image was linked for
    to its cubin (``arch`` first: ``link(..., arch=["sm_80", "sm_100"])``;
    given ``cubin`` and ``arch`` alone, it is that one); ``ptx`` keeps the PTX text of every PTX input so the
    CPU loader can interpret the same program (LTO-IR inputs finalised to
    PTX, the PTX embedded in fatbins, objects and libraries).  ``kernels``
    and ``device_functions`` map names to signatures (launch metadata
    included).  ``unusable``: kernels the image has but no signature could
    be made for, each with the reason; ``cpu_unavailable``: kernels without
    PTX for the CPU loader, each with the reason; ``raises``: the exception
    tables of numba kernels compiled with ``debug=True`` (not kept by
    :meth:`save`: such a kernel of a saved image reports an exception by its code);
    ``name_expressions``: the NVRTC name expressions of its kernels, each to its symbol
    (``module["block_sum<int, 64, true>"]`` finds the kernel by it; kept by :meth:`save`).
    """

    cubin: bytes | None
    arch: str | None
    kernels: Mapping[str, Signature] = field(default_factory=dict)
    device_functions: Mapping[str, Signature] = field(default_factory=dict)
    ptx: tuple[bytes, ...] = ()
    log: str = ""
    unusable: Mapping[str, str] = field(default_factory=dict)
    cpu_unavailable: Mapping[str, str] = field(default_factory=dict)
    raises: Mapping[str, Mapping[int, RaisedException]] = field(default_factory=dict)
    name_expressions: Mapping[str, str] = field(default_factory=dict)
    cubins: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.cubins and self.cubin is not None and self.arch is not None:
            object.__setattr__(self, "cubins", {self.arch: self.cubin})
        elif self.cubins and next(iter(self.cubins.items())) != (self.arch, self.cubin):
            raise ArgumentError(f"Image: cubins must start with arch and cubin ({self.arch!r}; got "
                                f"{', '.join(self.cubins)})")

    def load(self, device: Any = None, *, check_aliasing: bool = True, nvtx: bool | None = None,
             panics: str = "raise", **options: Any) -> Module:
        """Put the image on ``device``: an int, ``"cuda:N"``, a torch device, or ``"cpu"``.

        ``None`` picks the first GPU, or the CPU loader when there is none
        (``PTXBRIDGE_DEVICE`` overrides).  ``check_aliasing=False`` launches without checking the
        kernels' no-alias promises (``Module.check_aliasing``, docs/safety.md).  ``nvtx=True`` wraps
        every launch in an NVTX range named after the kernel, for Nsight Systems (default: on when
        ``PTXBRIDGE_NVTX=1``; :mod:`ptxbridge.launch.nvtx`).  ``panics="defer"``: a launch of a Rust
        kernel that can panic does not wait for the device; a panic is raised by the next
        ``Module.synchronize()`` or ``Module.check_panics()`` (default ``"raise"``: by the launch's own
        call, which waits for it; :mod:`ptxbridge.launch.panics`).  ``options`` are the
        loader's (the CPU loader's ``max_steps``), see :func:`ptxbridge.loaders.open_backend`.

        On a GPU the cubin for its arch loads, else a cubin it runs, else the PTX, JIT-compiled
        by the driver when the driver reads its ISA (:func:`ptxbridge.loaders.choice.choose_code`).

        Raises
        ------
        CudaError
            A GPU was asked for but there is no NVIDIA driver, or nothing of the image runs on it
            (the message names the GPU, the image's targets and what to rebuild).
        """
        return Module(self, open_backend(self, device, **options), check_aliasing=check_aliasing, nvtx=nvtx,
                      panics=panics)

    def to_bytes(self) -> bytes:
        """The image as one saved-image file (``docs/image-format.md``); the link log is not kept, the
        reasons kernels are unusable or not for the CPU loader are."""
        found = ImageFile(self.arch, self.cubin, self.ptx, self.kernels, self.device_functions, _created_by(),
                          self.unusable, self.cpu_unavailable, name_expressions=self.name_expressions,
                          cubins=self.cubins)
        return write_image_file(found)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> Image:
        """An image from :meth:`to_bytes` output; its signatures are checked against its cubin.

        Raises
        ------
        FormatError
            Not a saved image, corrupt or truncated (checksum), or signatures that disagree with
            the cubin's parameter records.
        """
        found = read_image_file(data, source)
        kernels = found.kernels
        for arch, cubin in reversed((found.cubins or {found.arch: found.cubin}).items()):
            if cubin is None:
                continue
            try:  # each cubin is checked; the first's launch facts are kept
                checked = with_cubin_facts(found.kernels, cubin, f"{source} cubin for {arch}")
            except (LinkError, AbiMismatchError) as exc:
                raise FormatError(f"the signatures do not match the cubin: {exc}", source=source) from None
            kernels = {name: checked[name] for name in found.kernels}
        return cls(found.cubin, found.arch, kernels, found.device_functions, found.ptx,
                   unusable=found.unusable, cpu_unavailable=found.cpu_unavailable,
                   name_expressions=found.name_expressions, cubins=found.cubins)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the image to ``path`` (replaced atomically); ``Image.open(path)`` reads it back.

        The conventional suffix is ``.ptxb``; the format is recognised by its content.
        """
        path = Path(path)
        data = self.to_bytes()
        try:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as out:
                out.write(data)
            os.chmod(out.name, 0o666 & ~_umask())  # a file to ship: what open() would make, not 0600
            os.replace(out.name, path)
        except OSError as exc:
            raise ArgumentError(f"cannot write image file {str(path)!r}: {exc.strerror}") from exc
        return path

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Image:
        """Read an image saved with :meth:`save`.

        Raises
        ------
        ArgumentError
            The file cannot be read.
        FormatError
            As :meth:`from_bytes`.
        """
        path = Path(path)
        try:
            size = path.stat().st_size
            if size > _MAX_FILE:
                raise FormatError(f"file is larger than {_MAX_FILE} bytes (got {size})", source=str(path))
            data = path.read_bytes()
        except OSError as exc:
            raise ArgumentError(f"cannot read image file {str(path)!r}: {exc.strerror}") from exc
        return cls.from_bytes(data, str(path))

    def __repr__(self) -> str:
        cubin = self.cubin is not None
        kind, size = ("cubin", len(self.cubin)) if cubin else ("PTX", sum(map(len, self.ptx)))
        code = describe_code(kind, self.arch, size, self.kernels)
        if len(self.cubins) > 1:
            code = describe_code("cubins", ", ".join(self.cubins), sum(map(len, self.cubins.values())),
                                 self.kernels)
        return (f"<ptxbridge.Image {code}; "
                f"{len(self.ptx)} PTX module{'s' if len(self.ptx) != 1 else ''} for the CPU loader>")
