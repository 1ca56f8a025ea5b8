"""The versioned JSON manifest of signatures (format in ``docs/manifest.md``).

A manifest travels with a code object that cannot describe its own
parameters (cuda-oxide bundles, rustc PTX, plain cubins).  Every field of every
kind is written out; reading is strict: unknown versions, unknown keys and
wrong JSON types raise :class:`FormatError` with the JSON path of the culprit.
"""

from __future__ import annotations

import functools
import json
import math
import reprlib
import typing
from collections import Counter
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

from .dtypes import DTYPES
from .errors import FormatError
from .kind_entries import KINDS
from .kinds import ParamType, StructField
from .signature import Convention, LaunchMeta, Param, Signature

__all__ = ["MANIFEST_VERSION", "to_manifest", "from_manifest", "dumps", "loads", "KIND_FIELDS"]

MANIFEST_VERSION = 1
_MAX_DEPTH = 64

# kind name -> (class, {field: form}), from the kind table (live: a registered kind is included);
# forms: dtype, type, opt_type, types, fields, ints, opt_ints, int, opt_int, bool, str, value, dim3.
# JSON keys are the dataclass field names.
KIND_FIELDS: dict[str, tuple[type, dict[str, str]]] = KINDS.manifest_fields
_LAUNCH_FIELDS = {"reqntid": "dim3", "maxntid": "dim3", "minnctapersm": "opt_int", "cluster": "dim3",
                  "static_shared": "int", "dynamic_shared": "int"}
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


# -- writing ------------------------------------------------------------------------
def _encode(value: Any, form: str) -> Any:
    if form == "dtype":
        return value.name
    if form in ("type", "opt_type"):
        return None if value is None else _encode_type(value)
    if form == "types":
        return [_encode_type(item) for item in value]
    if form == "fields":
        return [{"name": f.name, "type": _encode_type(f.type)} for f in value]
    if form in ("ints", "opt_ints", "dim3"):
        return None if value is None else list(value)
    if form == "value" and isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _encode_type(t: ParamType) -> dict[str, Any]:
    try:
        kind = KINDS.entry_of(t).name
    except TypeError as exc:
        raise TypeError(f"to_manifest: {exc}") from None
    out: dict[str, Any] = {"kind": kind}
    for name, form in KIND_FIELDS[kind][1].items():
        out[name] = _encode(getattr(t, name), form)
    return out


def _encode_signature(sig: Signature) -> dict[str, Any]:
    return {
        "name": sig.name,
        "kind": sig.kind,
        "convention": sig.convention.value,
        "params": [{"name": p.name, "type": _encode_type(p.type)} for p in sig.params],
        "returns": None if sig.returns is None else _encode_type(sig.returns),
        "launch": {name: _encode(getattr(sig.launch, name), form) for name, form in _LAUNCH_FIELDS.items()},
    }


def to_manifest(signatures: Iterable[Signature]) -> dict[str, Any]:
    """A JSON-ready dict: ``{"ptxbridge_manifest": 1, "signatures": [...]}``."""
    return {"ptxbridge_manifest": MANIFEST_VERSION,
            "signatures": [_encode_signature(sig) for sig in signatures]}


def dumps(signatures: Iterable[Signature], *, indent: int | None = 2) -> str:
    """The manifest as JSON text (strict JSON: no NaN/Infinity literals)."""
    return json.dumps(to_manifest(signatures), indent=indent, allow_nan=False)


# -- reading ------------------------------------------------------------------------
@functools.cache
def _field_kind(cls: type, name: str) -> type | None:
    """The one kind class field ``name`` of ``cls`` is declared as (``TileList.element: TileArray``),
    or None when it takes any kind (``ParamType``)."""
    hint = typing.get_type_hints(cls).get(name)
    return hint if isinstance(hint, type) and _kind_name(hint) is not None else None


def _kind_name(cls: type) -> str | None:
    return next((name for name, (kind, _) in KIND_FIELDS.items() if kind is cls), None)


class _Reader:
    """Decodes with a JSON path in every error, e.g. ``signatures[2].params[0].type.ndim``."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, message: str) -> FormatError:
        return FormatError(message, source=self.source, where=path or "$")

    def want(self, value: Any, kinds: type | tuple[type, ...], path: str, what: str) -> Any:
        """``value`` if it has one of the JSON types ``kinds`` (a bool is not an int here)."""
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.fail(path, f"must be {what} (got {reprlib.repr(value)})")
        return value

    def obj(self, value: Any, path: str, required: set[str], optional: set[str]) -> dict[str, Any]:
        self.want(value, dict, path, "an object")
        unknown = [key for key in value if key not in required and key not in optional]
        if unknown:
            known = ", ".join(sorted(required | optional))
            raise self.fail(path, f"unknown key {reprlib.repr(unknown[0])} (known: {known})")
        missing = sorted(required - set(value))
        if missing:
            raise self.fail(path, f"missing key {missing[0]!r}")
        return value

    def decode(self, value: Any, form: str, path: str, depth: int) -> Any:
        if form == "dtype":
            name = self.want(value, str, path, "a dtype name")
            if name not in DTYPES:
                raise self.fail(path, f"unknown dtype {reprlib.repr(name)} (known: {', '.join(DTYPES)})")
            return DTYPES[name]
        if form == "opt_type" and value is None:
            return None
        if form in ("type", "opt_type"):
            return self.type(value, path, depth + 1)
        if form == "types":
            items = self.want(value, list, path, "a list of types")
            return tuple(self.type(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(items))
        if form == "fields":
            return tuple(self.named(item, f"{path}[{i}]", depth, StructField)
                         for i, item in enumerate(self.want(value, list, path, "a list of fields")))
        if form in ("opt_int", "dim3") and value is None:
            return None
        if form in ("ints", "opt_ints", "dim3"):
            items = self.want(value, list, path, "a list of integers")
            if form == "dim3" and len(items) != 3:
                raise self.fail(path, f"must list 3 dimensions (got {len(items)})")
            optional = form == "opt_ints"
            allowed, what = ((int, type(None)), "an integer or null") if optional else (int, "an integer")
            return tuple(self.want(v, allowed, f"{path}[{i}]", what) for i, v in enumerate(items))
        if form in ("int", "opt_int"):
            return self.want(value, int, path, "an integer")
        if form == "bool":
            return self.want(value, bool, path, "true or false")
        if form == "str":
            return self.want(value, str, path, "a string")
        if isinstance(value, str) and value in _NON_FINITE:  # form "value"
            return _NON_FINITE[value]
        return self.want(value, (bool, int, float), path, 'a boolean, number, "inf", "-inf" or "nan"')

    def type(self, value: Any, path: str, depth: int) -> ParamType:
        if depth > _MAX_DEPTH:
            raise self.fail(path, f"types nest at most {_MAX_DEPTH} deep")
        kind = self.want(self.want(value, dict, path, "a type object").get("kind"), str,
                         f"{path}.kind", "a kind name")
        if kind not in KIND_FIELDS:
            known = ", ".join(KIND_FIELDS)
            raise self.fail(f"{path}.kind", f"unknown kind {reprlib.repr(kind)} (known: {known})")
        cls, spec = KIND_FIELDS[kind]
        has_default = {f.name for f in fields(cls)
                       if f.default is not MISSING or f.default_factory is not MISSING}
        self.obj(value, path, {"kind"} | (set(spec) - has_default), has_default)
        args = {name: self.decode(value[name], spec[name], f"{path}.{name}", depth)
                for name in spec if name in value}
        for name, item in args.items():  # a field declared as one kind takes only that kind, as in text
            wanted = _field_kind(cls, name) if spec[name] == "type" else None
            if wanted is not None and not isinstance(item, wanted):
                raise self.fail(f"{path}.{name}", f"must be a {_kind_name(wanted)} type "
                                                  f"(got a {_kind_name(type(item))})")
        try:
            return cls(**args)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None

    def named(self, value: Any, path: str, depth: int, cls: type) -> Any:
        item = self.obj(value, path, {"name", "type"}, set())
        return cls(self.want(item["name"], str, f"{path}.name", "a string"),
                   self.type(item["type"], f"{path}.type", depth + 1))

    def signature(self, value: Any, path: str) -> Signature:
        data = self.obj(value, path, {"name", "params"}, {"kind", "convention", "returns", "launch"})
        conv = self.want(data.get("convention", "c"), str, f"{path}.convention", "a string")
        if conv not in {c.value for c in Convention}:
            raise self.fail(f"{path}.convention", f"unknown convention {reprlib.repr(conv)} "
                                                  f"(known: {', '.join(c.value for c in Convention)})")
        launch = self.obj(data.get("launch", {}), f"{path}.launch", set(), set(_LAUNCH_FIELDS))
        params = self.want(data["params"], list, f"{path}.params", "a list")
        returns = data.get("returns")
        try:
            parts = (
                self.want(data["name"], str, f"{path}.name", "a string"),
                tuple(self.named(p, f"{path}.params[{i}]", 0, Param) for i, p in enumerate(params)),
                Convention(conv),
                LaunchMeta(**{k: self.decode(v, _LAUNCH_FIELDS[k], f"{path}.launch.{k}", 0)
                              for k, v in launch.items()}),
                self.want(data.get("kind", "kernel"), str, f"{path}.kind", "a string"),
                None if returns is None else self.type(returns, f"{path}.returns", 1),
            )
            return Signature(*parts)
        except FormatError:
            raise
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None


def from_manifest(data: dict[str, Any] | str, *, source: str = "<manifest>") -> list[Signature]:
    """The signatures of a manifest given as a dict or as JSON text."""
    if isinstance(data, str):
        return loads(data, source=source)
    reader = _Reader(source)
    top = reader.obj(data, "", {"ptxbridge_manifest", "signatures"}, set())
    version = top["ptxbridge_manifest"]
    if type(version) is not int or version != MANIFEST_VERSION:  # neither true nor 1.0 is version 1
        raise reader.fail("ptxbridge_manifest", f"manifest version {reprlib.repr(version)} is not supported "
                                                f"(this ptxbridge reads version {MANIFEST_VERSION})")
    items = reader.want(top["signatures"], list, "signatures", "a list")
    signatures = [reader.signature(item, f"signatures[{i}]") for i, item in enumerate(items)]
    duplicates = sorted(name for name, count in Counter(sig.name for sig in signatures).items() if count > 1)
    if duplicates:
        raise reader.fail("signatures", f"signature names must be unique (got {duplicates[0]!r} twice)")
    return signatures


def loads(text: str | bytes, *, source: str = "<manifest>") -> list[Signature]:
    """Parse manifest JSON text; bad JSON is a FormatError with its line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc.msg}", source=source,
                          where=f"{exc.lineno}:{exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number; nesting beyond Python's stack
        raise FormatError(f"not readable JSON: {exc}", source=source) from None
    return from_manifest(data, source=source)
