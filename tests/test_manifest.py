"""The JSON manifest: exact round trips, the documented example, strict and located errors."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
import typing
from dataclasses import fields
from pathlib import Path

import pytest
from _budget import growth
from hypothesis import given, settings
from hypothesis import strategies as st
from signature_strategies import signatures

from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.kinds import Constant, ParamType
from ptxbridge.abi.manifest import KIND_FIELDS, dumps, from_manifest, loads, to_manifest
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.syntax import parse_signatures

DOC = Path(__file__).resolve().parents[1] / "docs" / "manifest.md"


@settings(max_examples=300, deadline=None)
@given(st.lists(signatures, max_size=3, unique_by=lambda s: s.name))
def test_every_signature_round_trips_through_json(sigs: list[Signature]) -> None:
    text = dumps(sigs)
    again = loads(text)
    assert again == sigs
    assert [str(s) for s in again] == [str(s) for s in sigs]  # const kinds and -0.0 survive too
    assert from_manifest(to_manifest(sigs)) == sigs
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON literal {name}"))


def test_the_table_names_every_field_of_every_kind() -> None:
    """A field added to a kind must be added to the manifest too (or it would be dropped silently)."""
    assert {cls for cls, _ in KIND_FIELDS.values()} == set(typing.get_args(ParamType))
    for kind, (cls, spec) in KIND_FIELDS.items():
        assert list(spec) == [f.name for f in fields(cls)], kind


def test_documented_example() -> None:
    doc = DOC.read_text()
    manifest = re.search(r"```json\n(\{\n.*?)```", doc, re.S).group(1)
    text = re.search(r"```sig\n(.*?)```", doc, re.S).group(1)
    assert loads(manifest) == parse_signatures(text)


def test_constant_values_keep_their_kind() -> None:
    values = [True, 1, 1.0, -0.0, 1e300, math.inf, -math.inf]
    sig = Signature("k", tuple(_param(f"c{i}", Constant(v)) for i, v in enumerate(values)), "cutile")
    data = json.loads(dumps([sig]))
    written = [p["type"]["value"] for p in data["signatures"][0]["params"]]
    assert written == [True, 1, 1.0, -0.0, 1e300, "inf", "-inf"]
    read = [p.type.value for p in loads(dumps([sig]))[0].params]
    assert [(type(v), repr(v)) for v in read] == [(type(v), repr(v)) for v in values]
    nan = loads(dumps([Signature("n", (_param("c", Constant(math.nan)),))]))[0].params[0].type.value
    assert math.isnan(nan)


def _param(name: str, t: ParamType):
    from ptxbridge.abi.signature import Param

    return Param(name, t)


GOOD = to_manifest(parse_signatures(
    "#[convention(numba)] kernel k(a: Array<f32, 2, C>, t: TileArray<f32, 1>, s: struct S { x: u8 })"))


def _edit(path: str, value, delete: bool = False) -> dict:
    data = copy.deepcopy(GOOD)
    keys = re.findall(r"[^.\[\]]+", path)
    target = data
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = int(keys[-1]) if keys[-1].isdigit() else keys[-1]
    if delete:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize("data, where, message", [
    (_edit("ptxbridge_manifest", 2), "ptxbridge_manifest",
     "manifest version 2 is not supported (this ptxbridge reads version 1)"),
    (_edit("ptxbridge_manifest", True), "ptxbridge_manifest", "manifest version True is not supported"),
    (_edit("ptxbridge_manifest", 1.0), "ptxbridge_manifest", "manifest version 1.0 is not supported"),
    (_edit("signatures.0.params.1.type",
           {"kind": "tile_list", "element": {"kind": "scalar", "dtype": "f32"}}),
     "signatures[0].params[1].type.element", "must be a tile_array type (got a scalar)"),
    (_edit("ptxbridge_manifest", None, delete=True), "$", "missing key 'ptxbridge_manifest'"),
    (_edit("signatures", {}), "signatures", "must be a list (got {})"),
    (_edit("signatures.0.conv", "c"), "signatures[0]", "unknown key 'conv' (known: convention, kind"),
    (_edit("signatures.0.convention", "rust"), "signatures[0].convention", "unknown convention 'rust'"),
    (_edit("signatures.0.kind", "host"), "signatures[0]", "Signature.kind must be 'kernel' or 'device'"),
    (_edit("signatures.0.params.0.type.ndim", "2"), "signatures[0].params[0].type.ndim",
     "must be an integer (got '2')"),
    (_edit("signatures.0.params.0.type.ndim", True), "signatures[0].params[0].type.ndim",
     "must be an integer (got True)"),
    (_edit("signatures.0.params.0.type.ndim", -1), "signatures[0].params[0].type",
     "NumbaArray.ndim must be 0 to 64 (got -1)"),
    (_edit("signatures.0.params.0.type.kind", "array"), "signatures[0].params[0].type.kind",
     "unknown kind 'array' (known: scalar"),
    (_edit("signatures.0.params.0.type.dtype", "float32"), "signatures[0].params[0].type.dtype",
     "unknown dtype 'float32'"),
    (_edit("signatures.0.params.0.type.dtype", None, delete=True), "signatures[0].params[0].type",
     "missing key 'dtype'"),
    (_edit("signatures.0.params.1.type.static_shape", [None, 2]), "signatures[0].params[1].type",
     "needs one entry per axis (1) (got 2)"),
    (_edit("signatures.0.params.1.type.static_shape", [1.5]), "signatures[0].params[1].type.static_shape[0]",
     "must be an integer or null (got 1.5)"),
    (_edit("signatures.0.params.2.type.fields.0.type", []), "signatures[0].params[2].type.fields[0].type",
     "must be a type object"),
    (_edit("signatures.0.params.1.name", "a"), "signatures[0]", "parameter names must be unique"),
    (_edit("signatures.0.launch.reqntid", [1, 2]), "signatures[0].launch.reqntid",
     "must list 3 dimensions (got 2)"),
    (_edit("signatures.0.launch.speed", 1), "signatures[0].launch", "unknown key 'speed'"),
    (_edit("signatures.0.returns", {"kind": "constant", "value": "big"}), "signatures[0].returns.value",
     'must be a boolean, number, "inf", "-inf" or "nan"'),
    ({"ptxbridge_manifest": 1, "signatures": GOOD["signatures"] * 2}, "signatures",
     "signature names must be unique (got 'k' twice)"),
    (["not", "an", "object"], "$", "must be an object"),
])
def test_errors_name_the_json_path(data, where: str, message: str) -> None:
    with pytest.raises(FormatError) as info:
        from_manifest(data, source="k.json")
    assert (info.value.source, info.value.where) == ("k.json", where)
    assert message in info.value.reason


def test_tile_list_of_a_scalar_is_refused_like_the_text_syntax_refuses_it() -> None:
    with pytest.raises(FormatError, match="TileList elements must be TileArray"):
        parse_signatures("kernel k(l: TileList<f32>)")
    listed = parse_signatures("kernel k(l: TileList<TileArray<f32, 1>>)")
    assert loads(dumps(listed)) == listed


def test_many_signatures_are_read_in_linear_time() -> None:
    """Duplicate names were found with ``names.count`` per name: 40k signatures took 16.6 s."""
    one = GOOD["signatures"][0]

    def manifest(n: int):
        data = {"ptxbridge_manifest": 1, "signatures": [{**one, "name": f"k{i}"} for i in range(n)]}
        return lambda: from_manifest(data)

    assert growth(manifest, 250) < 10


def test_bad_json_text() -> None:
    with pytest.raises(FormatError) as info:
        loads('{\n  "ptxbridge_manifest": 1\n  "signatures": []}')
    assert info.value.where == "3:3" and "not valid JSON: Expecting ',' delimiter" in str(info.value)
    with pytest.raises(FormatError, match="not readable JSON"):
        loads('{"ptxbridge_manifest": ' + "9" * 5000 + "}")
    with pytest.raises(FormatError, match="not readable JSON"):
        loads("[" * 100_000 + "]" * 100_000)


def test_deep_nesting_is_refused() -> None:
    t: dict = {"kind": "scalar", "dtype": "u8"}
    for _ in range(80):
        t = {"kind": "pointer", "pointee": t, "mutable": True}
    data = {"ptxbridge_manifest": 1, "signatures": [{"name": "k", "params": [{"name": "p", "type": t}]}]}
    with pytest.raises(FormatError, match="types nest at most 64 deep"):
        from_manifest(data)


def test_defaults_may_be_left_out() -> None:
    data = {"ptxbridge_manifest": 1, "signatures": [
        {"name": "k", "params": [{"name": "a", "type": {"kind": "tile_array", "dtype": "f16", "ndim": 2}}]}]}
    assert from_manifest(json.dumps(data)) == parse_signatures("kernel k(a: TileArray<f16, 2, i32>)")


def _mutations(value, path=()):
    """Every (path, replacement) that swaps one JSON value for a wrong-typed or odd one."""
    for odd in (None, True, -1, 2**80, 1.5, "x", [], {}):
        yield path, odd
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _mutations(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _mutations(item, (*path, i))


_ALL_MUTATIONS = list(_mutations(GOOD))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_ALL_MUTATIONS), min_size=1, max_size=3))
def test_mutated_manifests_raise_only_format_errors(mutations) -> None:
    data = copy.deepcopy(GOOD)
    for path, odd in mutations:
        if not path:
            data = odd
            continue
        target = data
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = copy.deepcopy(odd)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    with contextlib.suppress(FormatError):
        from_manifest(data)
