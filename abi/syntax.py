"""The signature text syntax: parse and format (grammar in ``docs/signature-syntax.md``).

Rust-flavoured and exact: ``parse_signature(format_signature(sig)) == sig`` for
every signature.  One table per family of fields (launch attributes, cuTile
promises, generic types) drives both directions, so the two cannot drift.

The work is split by job: ``_syntax_tables`` (the shared tables),
``_syntax_tokens`` (tokens and literals), ``_syntax_parse`` (the grammar) and
``_syntax_format`` (text from the data); this module is the public face.
"""

from __future__ import annotations

from ._syntax_format import format_signature, format_type
from ._syntax_parse import Parser
from .kinds import ParamType
from .signature import Signature

__all__ = ["parse_signature", "parse_signatures", "parse_type", "format_signature", "format_type"]


def parse_signatures(text: str) -> list[Signature]:
    """Every signature in ``text``, in order; ``struct`` declarations and ``;`` may come between."""
    return Parser(text, Signature).items()


def parse_signature(text: str) -> Signature:
    """Exactly one signature (struct declarations before it are allowed)."""
    return Signature.parse(text)


def parse_type(text: str) -> ParamType:
    """One parameter type, e.g. ``&mut [f32]``."""
    parser = Parser(text, Signature)
    result = parser.type()
    if parser.peek().kind != "eof":
        raise parser.error("end of text")
    return result
