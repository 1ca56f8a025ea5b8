"""The kind table: one entry per parameter kind, consulted instead of switching over the kinds.

Lowering (:mod:`.lowering`), the text syntax (``_syntax_parse`` / ``_syntax_format``),
the manifest, the access trait (:mod:`.memory_access`) and the call path's
binders (``ptxbridge.launch.args``) all look a parameter's kind up here, so a new
kind is one :class:`KindEntry` (see ``docs/kinds.md``).  The built-in entries
are in :mod:`.kind_entries`, which also holds the table every module uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ._access import NO_MEMORY, Access
from ._flat import FlatParam
from .dtypes import DType
from .errors import AbiMismatchError
from .params import Convention

__all__ = ["Arg", "Custom", "Generic", "KindEntry", "KindTable", "TensorRule", "always"]


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a generic form ``Head<arg, arg, ...>``, read into attribute ``attr``.

    ``form`` is ``dtype``, ``int``, ``word`` (one of ``choices``) or ``type`` (a nested
    type, of class ``kind`` when given).  ``what`` names it in messages ("the number of
    dimensions").  ``keyword`` is written before the value (``align 8``).  An ``optional``
    argument may be left out (the dataclass default applies); its text is the hint in
    "expected '>' or ', <hint>'".  Every argument is always written.
    """

    attr: str
    form: str
    what: str
    choices: tuple[str, ...] = ()
    keyword: str | None = None
    optional: str | None = None
    kind: type | None = None


@dataclass(frozen=True, slots=True)
class Generic:
    """The form ``Head<args>{promises}``, parsed and formatted from this description alone.

    ``heads`` maps each head word to the attributes it fixes (``Tensor`` and
    ``Partition`` are one kind); ``promises`` is a table of (text key, attribute,
    value form) written in braces when they differ from the defaults.
    """

    heads: Mapping[str, Mapping[str, Any]]
    args: tuple[Arg, ...]
    promises: tuple[tuple[str, str, str], ...] = ()

    @property
    def starts(self) -> tuple[str, ...]:
        return tuple(self.heads)

    def head_of(self, t: Any) -> str:
        """The head word that writes ``t``."""
        for head, fixed in self.heads.items():
            if all(getattr(t, attr) == value for attr, value in fixed.items()):
                return head
        raise ValueError(f"no head word writes {t!r}")  # an entry whose heads miss a value


@dataclass(frozen=True, slots=True)
class Custom:
    """A form with its own grammar (Rust punctuation: ``*mut T``, ``&[T]``, ``(A, B)``...).

    ``parse(parser)`` reads it from the start token on (the parser is the syntax's
    cursor: ``expect``, ``accept``, ``type``, ``dtype``...); ``format(t, fmt)`` writes it,
    ``fmt`` writing nested types.
    """

    starts: tuple[str, ...]
    parse: Callable[[Any], Any]
    format: Callable[[Any, Callable[[Any], str]], str]


@dataclass(frozen=True, slots=True)
class TensorRule:
    """How a tensor argument fills a tensor-like kind (binding family ``tensor``).

    ``values(facts, t)`` checks the layout and returns the flat values in lowering order
    (raising :class:`~.tensor_rules.TensorProblem`); ``dtype(t)`` is the element type a
    tensor must have (None: any); ``refuses_readonly(t)``: a read-only tensor is refused;
    ``contiguous(t)``: ``"pointer"`` or ``"slice"`` when the values are just the address
    (and element count) of a contiguous tensor, which the launch plan may read inline;
    ``raw_address``: the kind is one bare address, so ``None`` passes a null pointer (and
    ``0`` under the C convention), and inside by-value aggregates any ``int`` is the address.
    """

    values: Callable[[Any, Any], tuple[int, ...]]
    dtype: Callable[[Any], DType | None] = lambda t: t.dtype
    refuses_readonly: Callable[[Any], bool] = lambda t: False
    contiguous: Callable[[Any], str | None] = lambda t: None
    raw_address: bool = False


def always(family: str) -> Callable[[Any, Convention], str]:
    """A binding rule that does not depend on the parameter or the convention."""
    return lambda t, conv: family


@dataclass(frozen=True, slots=True)
class KindEntry:
    """Everything ptxbridge knows about one parameter kind, in one place.

    Attributes
    ----------
    cls : type
        The kind's frozen dataclass.
    name : str
        Its manifest name (``"tile_array"``).
    fields : Mapping[str, str]
        Manifest value form of each dataclass field, in field order (see ``docs/manifest.md``).
    syntax : Generic or Custom
        How signature text writes it.
    lower : callable
        ``(name, t, convention, source) -> list[FlatParam]``: its PTX parameters.
    binding : callable
        ``(t, convention) -> family``: which binder family of the call path takes its
        arguments (``scalar``, ``tensor``, ``partition``, ``tile-list``, ``by-value``,
        ``by-pointer``, ``items``; see ``docs/kinds.md``).
    access : callable
        ``(t, convention or None) -> Access`` (default: carries no memory).
    by_value : callable or None
        ``t -> (size, align)`` in memory, for kinds that may be a struct field or tuple item.
    member : str or None
        How a by-value value is encoded inside an aggregate: ``scalar``, ``address``,
        ``bytes``, ``constant``, ``struct``, ``tuple``.
    children : callable
        ``t -> ((label, nested type), ...)``: a struct's fields by name, a tuple's items by
        index, a pointee or element by its attribute name.  The labels name members in
        messages and are the steps into a by-value argument (bounds the parser's expansion of
        declared structs; the no-alias check and the loader's buffer list walk by-value members).
    tensor : TensorRule or None
        For kinds that take tensors.
    promise_words : callable
        ``t -> text or None``: the no-alias promise in the words of the kind's source language
        (``"a &mut borrow"``), for aliasing errors; None: the access trait's promise names it.
    """

    cls: type
    name: str
    fields: Mapping[str, str]
    syntax: Generic | Custom
    lower: Callable[[str, Any, Convention, int], list[FlatParam]]
    binding: Callable[[Any, Convention], str]
    access: Callable[[Any, Convention | None], Access] = lambda t, conv: NO_MEMORY
    by_value: Callable[[Any], tuple[int, int]] | None = None
    member: str | None = None
    children: Callable[[Any], tuple[tuple[str | int, Any], ...]] = lambda t: ()
    tensor: TensorRule | None = None
    promise_words: Callable[[Any], str | None] = lambda t: None


class KindTable:
    """The registered kinds, by class, by manifest name and by the word that starts their text."""

    def __init__(self, entries: tuple[KindEntry, ...] = ()):
        self._by_class: dict[type, KindEntry] = {}
        self._by_start: dict[str, KindEntry] = {}
        self.manifest_fields: dict[str, tuple[type, dict[str, str]]] = {}  # live: the manifest reads it
        for entry in entries:
            self.register(entry)

    def register(self, entry: KindEntry) -> None:
        """Add a kind; its class, manifest name and start words must be new."""
        declared = [f.name for f in fields(entry.cls)]
        if list(entry.fields) != declared:
            raise ValueError(f"kind {entry.name!r}: fields must name every field of {entry.cls.__name__} "
                             f"in order ({declared}) (got {list(entry.fields)})")
        taken = [s for s in entry.syntax.starts if s in self._by_start]
        if entry.cls in self._by_class or entry.name in self.manifest_fields or taken:
            raise ValueError(f"kind {entry.name!r} ({entry.cls.__name__}) is registered already or its "
                             f"start words {taken} are taken")
        self._by_class[entry.cls] = entry
        self.manifest_fields[entry.name] = (entry.cls, dict(entry.fields))
        self._by_start.update(dict.fromkeys(entry.syntax.starts, entry))

    def unregister(self, cls: type) -> None:
        """Remove the kind of class ``cls`` (a plugin's kind that is no longer wanted)."""
        entry = self._by_class.pop(cls)
        del self.manifest_fields[entry.name]
        for start in entry.syntax.starts:
            del self._by_start[start]

    def __iter__(self) -> Iterator[KindEntry]:
        return iter(tuple(self._by_class.values()))

    def entry_of(self, t: Any) -> KindEntry:
        """The entry of ``t``'s kind; TypeError when ``t`` is not a parameter kind."""
        entry = self._by_class.get(type(t))
        if entry is None:
            raise TypeError(f"not a parameter kind (got {type(t).__name__})")
        return entry

    def starting(self, word: str) -> KindEntry | None:
        """The kind whose text starts with ``word`` (``*``, ``&``, ``TileArray``, ``f32``...)."""
        return self._by_start.get(word)

    def lower(self, name: str, t: Any, conv: Convention, source: int = 0) -> list[FlatParam]:
        return self.entry_of(t).lower(name, t, conv, source)

    def by_value(self, t: Any) -> tuple[int, int]:
        """(size, align) of ``t`` as a struct field or tuple item passed by value."""
        layout = self.entry_of(t).by_value
        if layout is None:
            raise AbiMismatchError(f"{type(t).__name__} cannot be passed by value (it is a struct field or "
                                   f"tuple item under a convention that passes those as one aggregate)")
        return layout(t)

    def access(self, t: Any, conv: Convention | None = None) -> Access:
        return self.entry_of(t).access(t, conv)

    def children(self, t: Any) -> tuple[Any, ...]:
        """The nested types of ``t``, without their labels."""
        return tuple(child for _label, child in self.entry_of(t).children(t))

    def labelled(self, t: Any) -> tuple[tuple[str | int, Any], ...]:
        """The nested types of ``t`` with their labels (field names, item indices)."""
        return self.entry_of(t).children(t)
