"""GPU targets: one parser of every spelling, one compatibility rule, one error class everywhere."""

from __future__ import annotations

import ast
import re

import pytest
from _packages import ROOT, source_files

from ptxbridge.abi.errors import ArgumentError, OptionError, TargetError
from ptxbridge.abi.targets import Target, known_target, parse_target
from ptxbridge.linker.target import choose_arch, normalize_arch


@pytest.mark.parametrize(("spelling", "target"), [
    ("sm_90", Target(9, 0)), ("sm_90a", Target(9, 0, "a")), ("sm_100f", Target(10, 0, "f")),
    ("compute_86", Target(8, 6)), ("lto_120a", Target(12, 0, "a")), ("75", Target(7, 5)),
    ("103f", Target(10, 3, "f")),
    ((9, 0), Target(9, 0)), ((12, 1), Target(12, 1)), (Target(8, 0), Target(8, 0)),
])
def test_every_spelling_parses_to_one_target(spelling, target):
    assert parse_target(spelling) == target


@pytest.mark.parametrize("bad", ["sm_9", "sm_90b", "gfx90a", "SM_90", " sm_90", "sm90", "compute_", "sm_09",
                                 "", (9,), (9, 10), (0, 9), (True, 0), 90, None, 9.0])
def test_a_bad_target_is_one_error_that_is_both_argument_and_option_error(bad):
    spelled = r"arch must look like 'sm_90' \(got .*\); GPU targets are spelled"
    with pytest.raises(TargetError, match=spelled) as info:
        parse_target(bad)
    assert isinstance(info.value, ArgumentError) and isinstance(info.value, OptionError)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert known_target(bad) is None


def test_names_and_numbers():
    t = Target(9, 0, "a")
    assert (t.sm, t.compute, t.lto, t.number, t.cc, t.plain, str(t)) == (
        "sm_90a", "compute_90a", "lto_90a", 90, (9, 0), Target(9, 0), "sm_90a")
    assert Target.from_number(100, "f") == Target(10, 0, "f")
    with pytest.raises(TargetError, match=r"minor 0-9 .*got 9, 10, ''"):
        Target(9, 10)
    with pytest.raises(TargetError, match="suffix"):
        Target(9, 0, "b")


def test_order_is_capability_then_features():
    assert sorted([Target(10, 0), Target(9, 0, "a"), Target(8, 6), Target(9, 0), Target(9, 0, "f")]) == [
        Target(8, 6), Target(9, 0), Target(9, 0, "f"), Target(9, 0, "a"), Target(10, 0)]
    assert Target(9, 0, "a") > Target(9, 0) and Target(12, 0) >= Target(10, 3)
    assert Target(8, 0) <= Target(8, 0)


@pytest.mark.parametrize(("built", "device", "cubin", "ptx"), [
    ("sm_80", "sm_86", True, True), ("sm_86", "sm_80", False, False), ("sm_80", "sm_90", False, True),
    ("sm_90a", "sm_90", True, True), ("sm_90a", "sm_100", False, False), ("sm_100f", "sm_103", True, True),
    ("sm_100f", "sm_120", False, False), ("sm_100", "sm_120", False, True), ("sm_100", "sm_90", False, False),
])
def test_the_family_rule_for_cubins_and_ptx(built, device, cubin, ptx):
    assert parse_target(built).cubin_runs_on(parse_target(device)) is cubin
    assert parse_target(built).ptx_runs_on(parse_target(device)) is ptx


def test_the_linker_keeps_its_spellings_and_rules():
    assert normalize_arch((8, 0)) == "sm_80" and normalize_arch("lto_90a") == "sm_90a"
    assert choose_arch(None, None, ["sm_100", None, "not-a-target"]) == "sm_100"
    assert choose_arch(None, "sm_90", ["sm_90a"]) == "sm_90a"
    assert choose_arch("sm_90", None, ["sm_100a"]) == "sm_90"
    with pytest.raises(TargetError, match=r"must look like 'sm_90', 'sm_90a' or \(9, 0\) \(got 'gfx90'\)"):
        choose_arch("gfx90", None, [])


# The regular expressions and prefix tests that take a target name apart, as the modules used to write them.
_PATTERN = re.compile(r"(?:sm|compute|lto)\W{0,2}_\W{0,3}(?:\[|\\d|\()")
_PREFIX_CALLS = {"startswith", "removeprefix", "lstrip", "partition", "split", "endswith"}


def _takes_a_target_apart(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and _PATTERN.search(node.value) is not None
    prefixes = ("sm_", "compute_", "lto_")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PREFIX_CALLS
            and any(isinstance(a, ast.Constant) and a.value in prefixes for a in node.args))


def _target_parsing(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if _takes_a_target_apart(node)]


def test_only_abi_targets_takes_target_names_apart():
    found = {str(p.relative_to(ROOT)): lines for p in source_files() if p.suffix == ".py"
             for lines in [_target_parsing(ast.parse(p.read_text(), str(p)))] if lines}
    assert found == {"abi/targets.py": found.get("abi/targets.py", [])} and found["abi/targets.py"]


def test_the_search_finds_what_the_modules_used_to_write():
    before = ['_ARCH = re.compile(r"sm_[0-9]{2,3}[af]?")', '_A = re.compile(r"sm_\\d{2,3}[af]?")',
              '_A = re.compile(r"(?:sm|compute)_(\\d{2,3}[af]?)")', 'n = arch.removeprefix("sm_")',
              'd = arch[3:] if arch.startswith("sm_") else ""']
    assert all(_target_parsing(ast.parse(line)) for line in before)
    assert not _target_parsing(ast.parse('m = f"built for sm_90; use {arch}"'))
