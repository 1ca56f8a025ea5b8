"""Linking: PTX modules -> one program of loaded functions and laid-out variables.

Functions are found by name across modules (a ``.extern .func`` resolves to
the ``.visible`` or ``.weak`` definition of another module, as nvJitLink would
link them).  Module variables are laid out once: ``.global`` / ``.const``
variables get emulator-owned host memory (with their initializers), ``.shared``
variables offsets in the per-block shared window (``.extern .shared`` arrays,
the dynamic shared memory, start after the static ones), ``.local`` variables
offsets in the per-thread local window.  Every instruction is translated here;
a function using PTX the emulator does not implement is kept as *refused*, and a
kernel that reaches it fails when it is launched (:meth:`Program.check_launch`),
so one unsupported kernel does not take the rest of its module down.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ptxbridge.abi.errors import LinkError, UnsupportedInstructionError
from ptxbridge.abi.ptx import TYPE_SIZES, PtxFunction, PtxModule, read_ptx

from . import ops_async, ops_control, ops_data, ops_float, ops_int, ops_mem, ops_set, ops_warp  # noqa: F401  (builders)
from .build import OPS, Context, Control, Symbol
from .builtins import BUILTINS, GRID_BUILTINS
from .liveness import block_local, writes
from .machine import KINDS, PLAIN, Function, Step
from .memory import PER_GRID, RESERVED_SMEM, WINDOWS, Region
from .parse import Body, parse_body
from .provenance import origins
from .values import DTYPES, immediate

__all__ = ["Program"]

_DYNAMIC_ALIGN = 16


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


class Program:
    """The linked PTX of an image: kernels, device functions and their variables.

    Attributes
    ----------
    functions
        Every defined function by name, translated.
    entries
        The PTX declaration of each kernel (``.entry``) by name.
    variables, named
        Regions of module ``.global`` / ``.const`` variables (grid-wide, at host
        addresses), in order and by name.
    shared_static, local_size
        Bytes of static shared memory per block and of local memory per thread.
    symbols
        Each translated function's name lookup (label, variable, parameter -> :class:`Symbol`),
        for the compiled tier, which translates the same instructions again.
    reserves
        Whether a module reads ``%reserved_smem_offset_*``: the block's first
        ``RESERVED_SMEM`` bytes of shared memory are then the system's (cooperative groups' scratch).
    """

    def __init__(self, texts: Sequence[bytes | str], sanitize: Any = None):
        self.sanitize = sanitize  # the sanitize= tools builders wrap accesses for (None: none)
        self.shared_names: list[tuple[int, int, str]] = []  # (offset, size, name) of shared variables
        modules = [read_ptx(text, source=f"<ptx #{i}>") for i, text in enumerate(texts)]
        files = [_source_files(text) for text in texts]
        self.functions: dict[str, Function] = {}
        self.entries: dict[str, PtxFunction] = {}
        self.variables: list[Region] = []
        self.named: dict[str, Region] = {}
        self.symbols: dict[str, Callable[[str], Symbol | None]] = {}
        # the reserved shared memory (cooperative groups' scratch) comes first when a module asks for it
        self.reserves = any(b"%reserved_smem" in (t.encode() if isinstance(t, str) else t) for t in texts)
        self.shared_static = RESERVED_SMEM if self.reserves else 0
        self.local_size = 0
        self._exported: dict[str, Symbol] = {}
        self._fixups: list[tuple[np.ndarray, int, str, int, int | None]] = []
        definitions = self._definitions(modules)
        for name in {fn.name for module in modules for fn in module.functions}:
            self._exported[name] = Symbol("func", name)  # declarations too: _check_calls names the missing
        # every function has an address (PTX may take it: function-pointer tables, vtables)
        keys = sorted({*definitions, *BUILTINS})
        self.function_addresses = {key: WINDOWS["func"] + 16 * i for i, key in enumerate(keys)}
        scopes = [self._module_variables(module) for module in modules]
        for index, module in enumerate(modules):  # module-local functions shadow exported names
            scopes[index].update({fn.name: Symbol("func", _local_key(fn.name, index))
                                  for fn in module.functions if _is_local(fn)})
        parsed: dict[str, tuple[Body, dict[str, Symbol]] | UnsupportedInstructionError] = {}
        for name, (index, fn) in definitions.items():
            try:
                parsed[name] = self._declare(fn, modules[index].source)
            except UnsupportedInstructionError as exc:  # refused when a kernel that needs it launches
                parsed[name] = exc
        self.dynamic_offset = _align(self.shared_static, _DYNAMIC_ALIGN)
        tables = [*scopes, *(p[1] for p in parsed.values() if not isinstance(p, UnsupportedInstructionError))]
        dynamic = sorted({n for table in tables for n, sym in table.items()
                          if sym.space == "shared" and sym.value is None})
        self.shared_names += [(self.dynamic_offset, 0, name) for name in dynamic]  # 0: runs to the end
        for scope in scopes:
            for name in [n for n, sym in scope.items() if sym.value is None]:
                scope[name] = Symbol("shared", self.dynamic_offset)
                if self._exported.get(name, scope[name]).value is None:
                    self._exported[name] = scope[name]
        self._fix_addresses(scopes)
        for name, (index, fn) in definitions.items():
            declared = parsed[name]
            if isinstance(declared, UnsupportedInstructionError):
                self.functions[name] = _refused(fn, declared)
            else:
                self.functions[name] = self._translate(fn, *declared, scopes[index], files[index],
                                                       texts[index])
            if fn.kind == "entry":
                self.entries[name] = fn
        self._add_builtins(modules)
        self._check_calls()
        self._reach: dict[str, tuple[frozenset[str], UnsupportedInstructionError | None]] = {}

    def check_launch(self, kernel: str) -> frozenset[str]:
        """What launching ``kernel`` needs (``"grid"``: all blocks at once); raises
        :class:`UnsupportedInstructionError` when it, or a function it calls, uses PTX the emulator
        does not implement, naming the instruction, the PTX line and the kernel."""
        if kernel not in self._reach:
            needs: set[str] = set()
            refused = None
            seen, pending = {kernel}, [kernel]
            while pending:
                fn = self.functions[pending.pop()]
                needs |= fn.needs
                if fn.refused is not None and refused is None:
                    refused = fn.refused
                for step in fn.steps:
                    callee = getattr(step.target, "function", None) if step.kind == KINDS["call"] else None
                    if callee is not None and callee not in seen and callee in self.functions:
                        seen.add(callee)
                        pending.append(callee)
            self._reach[kernel] = (frozenset(needs), refused)
        needs, refused = self._reach[kernel]
        if refused is not None:
            raise UnsupportedInstructionError(f"kernel {kernel!r} cannot run on the CPU loader: {refused}")
        return needs

    # -- linking ---------------------------------------------------------------------------

    @staticmethod
    def _definitions(modules: list[PtxModule]) -> dict[str, tuple[int, PtxFunction]]:
        """Every defined function by its program key: module-local ``.func`` are per module."""
        found: dict[str, tuple[int, PtxFunction]] = {}
        for index, module in enumerate(modules):
            for fn in module.functions:
                if fn.body is None:
                    continue
                if _is_local(fn):
                    found[_local_key(fn.name, index)] = (index, fn)
                    continue
                if fn.name in found and "weak" not in (fn.linkage, found[fn.name][1].linkage):
                    raise LinkError(f"function {fn.name!r} is defined in {modules[found[fn.name][0]].source} "
                                    f"and in {module.source}: a symbol may be defined once")
                found.setdefault(fn.name, (index, fn))
        return found

    def _add_builtins(self, modules: list[PtxModule]) -> None:
        """Runtime functions (``vprintf``, ``malloc``...) that modules declare and none defines."""
        for module in modules:
            for fn in module.functions:
                if fn.body is None and fn.name in BUILTINS and fn.name not in self.functions:
                    needs = frozenset(["grid"]) if fn.name in GRID_BUILTINS else frozenset()
                    self.functions[fn.name] = Function(fn.name, [], {}, tuple(p.name for p in fn.params),
                                                       tuple(p.name for p in fn.returns), BUILTINS[fn.name],
                                                       needs=needs)

    def _check_calls(self) -> None:
        for fn in self.functions.values():
            for step in fn.steps:
                if step.kind != KINDS["call"] or step.target.function is None:
                    continue
                callee = self.functions.get(step.target.function)
                where = f"{fn.name}, PTX line {step.ins.line}: calls {step.target.function!r}"
                if callee is None:
                    raise LinkError(f"{where}, which no linked module defines")
                shape = (len(step.target.returns), len(step.target.arguments))
                if shape != (len(callee.returns), len(callee.params)):
                    raise LinkError(f"{where} with {shape[0]} return and {shape[1]} argument parameters; "
                                    f"it declares {len(callee.returns)} and {len(callee.params)}")

    def _fix_addresses(self, scopes: list[dict[str, Symbol]]) -> None:
        """Write the generic address of each variable named in an initializer."""
        for data, offset, target, addend, shift in self._fixups:
            found = next((scope[target] for scope in scopes if target in scope), None) or \
                self._exported.get(target)
            if found is not None and found.space == "func" and found.value in self.function_addresses:
                address = self.function_addresses[found.value] + addend
            elif found is None or found.space not in ("global", "const", "shared"):
                raise LinkError(f"a variable initializer takes the address of {target!r}, which is no "
                                "function, global, constant or shared variable of the linked modules")
            else:
                address = found.value + addend + (WINDOWS["shared"] if found.space == "shared" else 0)
            if shift is None:
                data[offset:offset + 8] = np.array([address % (1 << 64)], np.uint64).view(np.uint8)
            else:  # one byte of the address (a mask operator)
                data[offset] = (address >> shift) & 0xFF

    def _module_variables(self, module: PtxModule) -> dict[str, Symbol]:
        scope: dict[str, Symbol] = {}
        for var in module.globals:
            if var.linkage == "extern" and not (var.state_space == "shared" and var.array and 0 in var.array):
                continue  # resolved through the exported table once defined
            if var.linkage in ("weak", "common") and var.name in self._exported:
                scope[var.name] = self._exported[var.name]  # one definition for all, as nvJitLink keeps
                continue
            count = int(np.prod(var.array)) if var.array else 1
            symbol = self._place(var.name, var.state_space, var.type, var.align or TYPE_SIZES[var.type],
                                 count * TYPE_SIZES[var.type], var.initializer, dynamic=count == 0)
            scope[var.name] = symbol
            if var.linkage in ("visible", "weak", "common", "extern"):
                self._exported.setdefault(var.name, symbol)
        return scope

    def _place(self, name: str, space: str, ptx_type: str, align: int, size: int, initializer: str | None,
               dynamic: bool = False) -> Symbol:
        """Lay out one variable and return what its name means."""
        if space == "shared":
            if dynamic:  # placed after every static variable, see __init__
                return Symbol("shared", None)
            offset = _align(self.shared_static, align)
            self.shared_static = offset + size
            self.shared_names.append((offset, size, name))
            return Symbol("shared", offset)
        if space == "local":
            offset = _align(self.local_size, align)
            self.local_size = offset + size
            return Symbol("local", offset)
        if space in ("global", "const"):
            data = np.zeros(max(size, 1) + 16, np.uint8)
            start = (-data.ctypes.data) % 16
            data = data[start:start + max(size, 1)]
            if initializer is not None:
                data[:size], fixups = _initial_bytes(name, ptx_type, initializer, size)
                self._fixups += [(data, *fixup) for fixup in fixups]
            region = Region(f"{space} variable {name}", data.ctypes.data, size, data, PER_GRID,
                            writable=space == "global")
            self.variables.append(region)
            self.named.setdefault(name, region)
            return Symbol(space, region.base)
        raise UnsupportedInstructionError(f"variable {name!r} in .{space} space is not supported")

    # -- translation -----------------------------------------------------------------------

    def _declare(self, fn: PtxFunction, source: str) -> tuple[Body, dict[str, Symbol]]:
        """Parse a body and place its variables: labels, parameters and body-level declarations."""
        body = parse_body(fn.body or "", fn.body_line, source, fn.name)
        local: dict[str, Symbol] = {label: Symbol("label", index) for label, index in body.labels.items()}
        if fn.kind == "entry":
            for param, offset in zip(fn.params, fn.offsets, strict=True):
                local[param.name] = Symbol("kparam", offset)
        else:
            for param in (*fn.params, *fn.returns):
                if param.state_space != "param":
                    raise UnsupportedInstructionError(
                        f"{fn.name}: .reg parameters (old-style ABI) are not supported (got {param.name})")
                local[param.name] = Symbol("param", param.nbytes)
        for var in body.variables:
            if var.space == "param":
                local[var.name] = Symbol("param", var.size)
            else:
                local[var.name] = self._place(var.name, var.space, var.type, var.align, var.size,
                                              var.initializer, dynamic=var.size == 0)
        return body, local

    def _translate(self, fn: PtxFunction, body: Body, local: dict[str, Symbol],
                   module_scope: dict[str, Symbol], files: dict[int, str],
                   text: str | bytes = "") -> Function:
        if any(sym.value is None for sym in local.values()):
            dynamic = Symbol("shared", self.dynamic_offset)
            local = {k: dynamic if v.value is None else v for k, v in local.items()}

        def resolve(name: str) -> Symbol | None:
            return local.get(name) or module_scope.get(name) or self._exported.get(name)

        self.symbols[fn.name] = resolve
        steps = []
        needs: set[str] = set()
        written: list[list[tuple[str, list[bool]]]] = []
        entry = fn.kind == "entry"
        kernel_params = {p.name: o for p, o in zip(fn.params, fn.offsets, strict=True)} if entry else {}
        found = origins(body.instructions, kernel_params, body.registers.__contains__)
        for ins, origin in zip(body.instructions, found, strict=True):
            cx = Context(fn.name, body.registers, resolve, ins, self.function_addresses, origin,
                         self.sanitize, files)
            builder = OPS.get(ins.opcode)
            try:
                if builder is None:
                    raise cx.unsupported(f"instruction '{ins.opcode}' is not implemented by the CPU loader")
                built = builder(cx)
                guard = cx.read(ins.guard, "pred") if ins.guard is not None else None
            except UnsupportedInstructionError as exc:  # refused when a kernel that needs it launches
                return _refused(fn, exc)
            needs |= cx.needs
            written.append(cx.writes)
            if isinstance(built, Control):
                steps.append(Step(KINDS[built.kind], None, built.target, guard, ins.guard_negated, ins))
            else:
                steps.append(Step(PLAIN, built, None, guard, ins.guard_negated, ins))
        _unmask(body, steps, written)
        zeros = {name: DTYPES[t].type(0) for name, t in body.registers.items()}
        return Function(fn.name, steps, zeros, tuple(p.name for p in fn.params),
                        tuple(p.name for p in fn.returns), needs=frozenset(needs), files=files,
                        text=text, origins=tuple(found))


_FILE = re.compile(rb'^[ \t]*\.file[ \t]+(\d+)[ \t]+"([^"\n]*)"', re.M)  # one line each: no backtracking


def _source_files(text: bytes | str) -> dict[int, str]:
    """The ``.file N "name"`` directives of a module (PTX ISA 11.5.3): what ``.loc N line`` names."""
    data = text.encode() if isinstance(text, str) else text
    return {int(number): name.decode(errors="replace") for number, name in _FILE.findall(data)}


def _unmask(body: Body, steps: list[Step], written: list[list[tuple[str, list[bool]]]]) -> None:
    """Let the writes of block-local registers skip the mask (:mod:`.liveness`)."""
    plain = [step.kind == PLAIN for step in steps]
    local = block_local(body.instructions, plain, list(body.labels.values()), list(body.registers))
    for ins, is_plain, cells in zip(body.instructions, plain, written, strict=True):
        if writes(ins, is_plain):
            for name, unmasked in cells:
                unmasked[0] = name in local


def _refused(fn: PtxFunction, reason: UnsupportedInstructionError) -> Function:
    """A function the emulator cannot run: launching a kernel that calls it raises ``reason``."""
    return Function(fn.name, [], {}, tuple(p.name for p in fn.params), tuple(p.name for p in fn.returns),
                    refused=reason)


def _is_local(fn: PtxFunction) -> bool:
    """A ``.func`` with no linkage directive is visible only inside its module (PTX ISA 11.6)."""
    return fn.kind == "func" and fn.linkage == ""


def _local_key(name: str, module_index: int) -> str:
    return f"{name}@{module_index}"


_ADDRESS_ITEM = re.compile(r"^(generic\()?([A-Za-z_$%][\w$.]*)\)?(?:\+(\d+))?$")
_MASKED_ITEM = re.compile(r"^0[xX][fF]{2}(0*)\((?:generic\()?([A-Za-z_$%][\w$.]*)\)?(?:\+(\d+))?\)$")


def _initial_bytes(name: str, ptx_type: str, text: str,
                   size: int) -> tuple[np.ndarray, list[tuple[int, str, int]]]:
    """An initializer ``{1, 2, 3}`` / ``0f3F800000`` / nested braces as little-endian bytes.

    Items naming a variable (``x``, ``generic(x)``, ``x+8``: PTX ISA 5.4.4) are
    returned as fixups ``(byte offset, name, addend, None)`` to fill in once every
    variable has an address; a byte of an address in a ``.b8``/``.u8`` array
    (``0xFF00(generic(x))``, the mask operators of the same section, which
    nvJitLink's LTO writes) is ``(byte offset, name, addend, bit shift)``.
    """
    dt = DTYPES[ptx_type]
    values, fixups = [], []
    for index, item in enumerate(t for t in re.split(r"[\s,{}]+", text) if t):
        address = _ADDRESS_ITEM.match(item)
        if address is not None and not item[0].isdigit():
            if dt.itemsize != 8:
                raise UnsupportedInstructionError(
                    f"initializer of {name!r}: an address needs a 64-bit element (got .{ptx_type})")
            fixups.append((index * 8, address.group(2), int(address.group(3) or 0), None))
            values.append(dt.type(0))
            continue
        masked = _MASKED_ITEM.match(item)
        if masked is not None and dt.itemsize == 1:
            fixups.append((index, masked.group(2), int(masked.group(3) or 0), 4 * len(masked.group(1))))
            values.append(dt.type(0))
            continue
        try:
            values.append(immediate(item, ptx_type))
        except (ValueError, KeyError):
            raise UnsupportedInstructionError(
                f"initializer of {name!r}: {item!r} is neither a constant nor a variable address") from None
    raw = np.array(values, dtype=dt).view(np.uint8)
    if len(raw) > size:
        raise UnsupportedInstructionError(
            f"initializer of {name!r} has {len(raw)} bytes for a {size}-byte variable")
    out = np.zeros(size, np.uint8)
    out[:len(raw)] = raw
    return out, fixups
