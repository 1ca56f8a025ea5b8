"""How a kernel call is spelled: its parameters by position or by name, then ``grid=``, ``block=``,
``shared_mem=``, ``stream=`` and ``check_aliasing=`` as keywords.

The C launcher and ``Kernel._call_python`` take the common spelling (parameters by position, the
launch keywords, ``grid=`` given) without coming here.  Everything else does: parameters passed by
name are put in place, and a missing ``grid=``, launch dimensions passed by position, a parameter
given twice or missing, and unknown keywords are each an :class:`ArgumentError` naming the kernel
and showing the call it expects.  The same facts give the kernel's ``inspect.Signature`` and its
``help()`` text.

A parameter can be passed by name when its name is a Python identifier, not a keyword, not one of
the launch keywords, and unique in the kernel; others (e.g. Rust's ``_``) go by position only.
"""

from __future__ import annotations

import difflib
import inspect
import keyword
from collections.abc import Mapping
from typing import Any

from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.syntax import format_type

__all__ = ["LAUNCH_KEYWORDS", "CallForm"]

LAUNCH_KEYWORDS = ("grid", "block", "shared_mem", "stream", "check_aliasing")
_MISSING = object()


class CallForm:
    """The spelling of one kernel's calls (built on a kernel's first unusual call, or for ``help``)."""

    __slots__ = ("by_name", "default_block", "kernel", "names", "signature")

    def __init__(self, kernel: str, signature: Signature, default_block: bool):
        self.kernel = kernel
        self.signature = signature
        self.default_block = default_block
        self.names = tuple(p.name for p in signature.params)
        self.by_name = {name: i for i, name in enumerate(self.names)
                        if name.isidentifier() and not keyword.iskeyword(name) and name not in LAUNCH_KEYWORDS
                        and self.names.count(name) == 1}

    def usage(self) -> str:
        """``saxpy(a, x, y, n, grid=..., block=...)``: the call this kernel expects."""
        block = "[block=...]" if self.default_block else "block=..."
        return f"{self.kernel}({', '.join([*self.names, 'grid=...', block])})"

    def _fail(self, problem: str) -> ArgumentError:
        return ArgumentError(f"{self.kernel}: {problem}; call it as {self.usage()}")

    def bind(self, args: tuple, kwargs: Mapping[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """(arguments in parameter order, launch keywords) of a call, or the ArgumentError that says
        what is wrong with it."""
        launch = {k: v for k, v in kwargs.items() if k in LAUNCH_KEYWORDS}
        named = {k: v for k, v in kwargs.items() if k not in LAUNCH_KEYWORDS}
        for name in named:
            if name not in self.by_name:
                close = difflib.get_close_matches(name, [*LAUNCH_KEYWORDS, *self.by_name], n=1)
                hint = f" (did you mean {close[0]}=?)" if close else ""
                raise self._fail(f"unexpected keyword argument {name!r}{hint}")
        if named and len(args) > len(self.names):
            raise self._fail(f"got {len(args)} positional arguments for {len(self.names)} parameters, and "
                             f"{', '.join(map(repr, named))} by name")
        if named:
            values = [*args, *[_MISSING] * (len(self.names) - len(args))]
            for name, value in named.items():
                index = self.by_name[name]
                if index < len(args):
                    raise self._fail(f"argument {name!r} given twice, by position (#{index + 1}) and by name")
                values[index] = value
            missing = [repr(self.names[i]) for i, v in enumerate(values) if v is _MISSING]
            if missing:
                raise self._fail(f"missing argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
            args = tuple(values)
        if "grid" not in launch:
            extra = len(args) - len(self.names)
            if 0 < extra <= len(LAUNCH_KEYWORDS) and not named:
                raise self._fail(f"grid= is required, as a keyword (got {len(args)} positional arguments for "
                                 f"{len(self.names)} parameters: grid and block go by keyword)")
            raise self._fail("grid= is required")
        return args, launch

    def inspect_signature(self) -> inspect.Signature:
        """The kernel's parameters (annotated with their ptxbridge types) and the launch keywords."""
        kinds = inspect.Parameter
        last_positional = max((i for i, n in enumerate(self.names) if n not in self.by_name), default=-1)
        taken: set[str] = set(LAUNCH_KEYWORDS)
        params = []
        for i, param in enumerate(self.signature.params):
            name = param.name if param.name in self.by_name else f"_{i}"
            while name in taken:
                name += "_"
            taken.add(name)
            kind = kinds.POSITIONAL_ONLY if i <= last_positional else kinds.POSITIONAL_OR_KEYWORD
            params.append(kinds(name, kind, annotation=format_type(param.type)))
        block = inspect.Parameter.empty if not self.default_block else None
        params += [kinds("grid", kinds.KEYWORD_ONLY), kinds("block", kinds.KEYWORD_ONLY, default=block),
                   kinds("shared_mem", kinds.KEYWORD_ONLY, default=0),
                   kinds("stream", kinds.KEYWORD_ONLY, default=None),
                   kinds("check_aliasing", kinds.KEYWORD_ONLY, default=True)]
        return inspect.Signature(params, return_annotation=None)

    def doc(self) -> str:
        """The ``help(kernel)`` text: the signature, the expected call and what each keyword does."""
        block = ("defaults to the kernel's .reqntid" if self.default_block
                 else "is required (the kernel declares no .reqntid)")
        positional = [n for n in self.names if n not in self.by_name]
        only = f" ({', '.join(dict.fromkeys(positional))}: by position only)" if positional else ""
        return (f"{self.signature}\n\n"
                f"Launch: {self.usage()}\n"
                f"Arguments go by position or by parameter name{only}, in the types above.\n"
                "grid, block: an int or a tuple of up to 3 ints (blocks in the grid, threads in a block); "
                f"block {block}.\n"
                "shared_mem: bytes of dynamic shared memory (default 0).\n"
                "stream: a stream object or handle (default: the tensors' framework's current stream).\n"
                "check_aliasing: refuse arguments that break the kernel's no-alias promises (default True; "
                "docs/safety.md).\n")
