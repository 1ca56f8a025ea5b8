"""No regex of ptxbridge backtracks catastrophically: a ReDoS check over every pattern in the package.

The patterns are found, not listed: every ``re.compile`` / ``re.match`` / ``re.sub``... call in
``abi/``, ``bridge/`` and ``loaders/`` with a literal pattern, every compiled pattern a module keeps
at module level (so patterns built with f-strings count too), and the few call sites whose pattern
is computed, each named in :data:`COMPUTED` with the patterns it can receive.  A new call site whose
pattern is neither literal nor listed fails :func:`test_every_regex_call_site_is_checked`.

Adversarial inputs come from each pattern's own structure (``re._parser``): for every repeat, a
prefix that reaches it, its body repeated n times ("pumped"), then a character that makes the match
fail.  A pattern is tried the way the code uses it (``match`` at the start, or ``search`` across
the input).  Any run that uses more than 1 s of CPU fails (exponential backtracking); one that takes
more than a few ms is timed again at n and 4n and must grow ~linearly, not ~16x (quadratic).
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
import re._compiler as sre_compile  # private, but the only parser of Python's regex syntax
import re._constants as sre
import re._parser as sre_parse
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _budget import BudgetExceeded, cpu_budget, growth
from _packages import ROOT, module_name, source_files

FUNCTIONS = {"compile", "match", "fullmatch", "search", "sub", "subn", "findall", "finditer", "split"}
SCANNING = {"search", "sub", "subn", "findall", "finditer", "split"}  # methods that try every start
# (file, function) -> the patterns a computed-pattern call site can receive, and how it uses them.
OXIDE = "bridge/frontends/oxide/__init__.py"
COMPUTED = {
    ("abi/check.py", "find_entry"): ([re.escape("saxpy") + r"_TID_[0-9a-fA-F]{32}"], "fullmatch"),
    (OXIDE, "_mentions"): ([rf"\b{re.escape('Foo')}\b"], "search"),
    (OXIDE, "load"): ([rf"{re.escape('scale')}_TID_[0-9a-f]{{32}}"], "fullmatch"),
    # Reader.take(pattern): the literal arguments of take()/need() calls in the same file
    ("abi/cutile_names.py", "take"): (None, "match"),
}
ALPHABET = " \t\n\r\x00azAZ09_$%.,;:/*\"'{}()[]<>#+-=\\|@!?~&^`\x7f\xe9\xff"
KILLERS = ["", "\x00", "!", "\n", "a", "0"]
LENGTH = 5000  # characters of pumped input
SUSPICIOUS_S = 0.005  # a linear regex reads 5000 characters in well under this


def _literal(node: ast.expr) -> str | bytes | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) else None


def _flags(call: ast.Call, position: int) -> int:
    node = next((k.value for k in call.keywords if k.arg == "flags"), None)
    if node is None and len(call.args) > position:
        node = call.args[position]
    return 0 if node is None else eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re})


def _enclosing_functions(tree: ast.Module) -> dict[ast.AST, str]:
    """Node -> name of the innermost function around it (``ast.walk`` meets outer functions first)."""
    owner: dict[ast.AST, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            owner.update(dict.fromkeys(ast.walk(fn), fn.name))
    return owner


def _sites() -> tuple[dict[tuple, set[str]], list[str]]:
    """{(pattern, flags): methods used} over the package, and the unlisted computed call sites."""
    found: dict[tuple, set[str]] = {}
    unlisted = []

    def add(pattern: str | bytes, flags: int, methods: set[str]) -> None:
        found.setdefault((pattern, flags), set()).update(methods)

    for path in source_files():
        if path.suffix == ".py":
            rel = str(path.relative_to(ROOT))
            tree = ast.parse(path.read_text())
            owner, module_level = _enclosing_functions(tree), _module_level(tree)
            module_patterns = {}
            for node in tree.body:  # NAME = re.compile(...) at module level: the compiled object
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                        and ast.unparse(node.value.func) == "re.compile"):
                    module_patterns.update({t.id: _compiled(path, t.id, node.value) for t in node.targets})
            used: dict[str, set[str]] = {name: set() for name in module_patterns}
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                target, method = node.func.value, node.func.attr
                if isinstance(target, ast.Name) and target.id in used:
                    used[target.id].add(method)
                elif (isinstance(target, ast.Name) and target.id == "re" and method in FUNCTIONS
                      and node not in module_level):
                    pattern = _literal(node.args[0]) if node.args else None
                    parent_methods = {method} if method != "compile" else _called_on(tree, node)
                    if pattern is not None:
                        add(pattern, _flags(node, 1 if method == "compile" else 2 if method in
                                            ("match", "fullmatch", "search", "findall", "finditer")
                                            else 3 if method == "split" else 4), parent_methods)
                    else:
                        key = (rel, owner.get(node, "<module>"))
                        if key not in COMPUTED:
                            unlisted.append(f"{rel}:{node.lineno} ({key[1]})")
                        else:
                            patterns, how = COMPUTED[key]
                            for p in patterns or _take_arguments(tree):
                                add(p, 0, {how})
            for name, compiled in module_patterns.items():
                add(compiled.pattern, compiled.flags, used[name] or {"match", "search"})
    return found, unlisted


def _compiled(path: Path, name: str, call: ast.Call) -> re.Pattern:
    """The module's compiled pattern; where an optional dependency keeps the module from importing,
    the pattern compiled from its literal (a pattern built at import time then fails the test)."""
    try:
        return getattr(importlib.import_module(module_name(path)), name)
    except ImportError as exc:
        literal = _literal(call.args[0])
        if literal is None:
            pytest.fail(f"{path}: {name} is built at import time and the module does not import ({exc})")
        return re.compile(literal, _flags(call, 1))


def _module_level(tree: ast.Module) -> set[ast.AST]:
    """Nodes of module-level ``NAME = re.compile(...)`` values (checked as the compiled object)."""
    return {n for stmt in tree.body if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
            and ast.unparse(stmt.value.func) == "re.compile" for n in ast.walk(stmt.value)}


def _called_on(tree: ast.Module, compile_call: ast.Call) -> set[str]:
    """How ``re.compile(...)`` inside a function is used: ``re.compile(p).match(...)`` -> match."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.value is compile_call:
            return {node.attr}
    return {"match", "search"}


def _take_arguments(tree: ast.Module) -> list[str]:
    return sorted({lit for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and isinstance(node.func, ast.Attribute) and node.func.attr in ("take", "need")
                   and node.args and isinstance(lit := _literal(node.args[0]), str)})


SITES, UNLISTED = _sites()


# --- adversarial inputs from the pattern's structure --------------------------------------------
REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
CHARACTER = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)


class _Samples:
    """Short strings each piece of a parsed pattern matches, for building inputs."""

    def __init__(self, compiled: re.Pattern):
        self.compiled = compiled
        self.tree = sre_parse.parse(compiled.pattern, compiled.flags)

    def char(self, node: tuple) -> list[str]:
        single = sre_compile.compile(sre_parse.SubPattern(self.tree.state, [node]), self.compiled.flags)
        text = isinstance(self.compiled.pattern, str)
        return [c for c in ALPHABET if single.fullmatch(c if text else c.encode("latin-1"))][:3]

    def of(self, seq: list, limit: int = 3) -> list[str]:
        out = [""]
        for node in seq:
            out = [a + b for a, b in itertools.product(out, self.node(node))][:limit]
        return out

    def node(self, node: tuple) -> list[str]:
        op, av = node
        if op in CHARACTER:
            return self.char(node)
        if op == sre.BRANCH:
            return [s for branch in av[1] for s in self.of(branch, 2)][:4]
        if op == sre.SUBPATTERN:
            return self.of(av[3])
        if op == sre.ATOMIC_GROUP:
            return self.of(av)
        if op in REPEATS:
            return [s * max(av[0], 1) for s in self.of(av[2])]
        return [""]  # anchors, lookarounds, group references

    def pumps(self, seq: list | None = None, prefixes: tuple[str, ...] = ("",)) -> Iterator[tuple[str, str]]:
        """(prefix reaching a repeat, a string its body matches) for every repeat in the pattern."""
        seq = list(self.tree) if seq is None else seq
        for i, (op, av) in enumerate(seq):
            before = tuple(p + s for p in prefixes for s in self.of(seq[:i], 2))[:2]
            if op in REPEATS:
                for body in self.of(av[2]):
                    if body:
                        yield from ((p, body) for p in before)
                yield from self.pumps(list(av[2]), before)
            elif op == sre.BRANCH:
                for branch in av[1]:
                    yield from self.pumps(branch, before)
            elif op == sre.SUBPATTERN:
                yield from self.pumps(list(av[3]), before)
            elif op == sre.ATOMIC_GROUP:
                yield from self.pumps(list(av), before)
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                yield from self.pumps(list(av[1]), before)


def _runner(compiled: re.Pattern, method: str, prefix: str, body: str, killer: str):
    text = isinstance(compiled.pattern, str)

    def make(n: int):
        data = prefix + body * n + killer
        subject = data if text else data.encode("latin-1")
        call = compiled.match if method == "match" else compiled.search
        return lambda: call(subject)

    return make


def _check(pattern: str | bytes, flags: int, methods: set[str], budget: float = 1.0) -> list[str]:
    """The first input on which ``pattern`` backtracks catastrophically, if there is one."""
    compiled = re.compile(pattern, flags)
    samples = _Samples(compiled)
    modes = ({"match"} if methods - SCANNING else set()) | ({"search"} if methods & SCANNING else set())
    problems: list[str] = []
    seen = set()
    for prefix, body in samples.pumps():
        for killer, mode in itertools.product(KILLERS, sorted(modes)):
            if (prefix, body, killer, mode) in seen:
                continue
            seen.add((prefix, body, killer, mode))
            make = _runner(compiled, mode, prefix, body, killer)
            n = max(LENGTH // len(body), 1)
            what = f"{pattern!r} .{mode}({prefix!r} + {body!r} * n + {killer!r})"
            try:
                with cpu_budget(budget, what):
                    start = time.thread_time()
                    make(n)()
                    slow = time.thread_time() - start > SUSPICIOUS_S
                    ratio = growth(make, max(n // 4, 1)) if slow else 0.0
            except BudgetExceeded as exc:
                return [str(exc)]
            if ratio >= 10:
                return [f"{what}: 4x the input took {ratio:.0f}x the CPU time"]
    return problems


def test_every_regex_call_site_is_checked():
    assert not UNLISTED, ("regex calls with a computed pattern: add each to COMPUTED with the patterns "
                          f"it can receive: {UNLISTED}")
    assert len(SITES) > 30  # the scan found the package's patterns (a broken scan finds none)


@pytest.mark.parametrize(("pattern", "flags"), sorted(SITES, key=repr), ids=lambda v: repr(v)[:40])
def test_no_catastrophic_backtracking(pattern, flags):
    problems = _check(pattern, flags, SITES[(pattern, flags)])
    assert not problems, "\n".join(problems)


def test_the_check_finds_the_sniffer_regex_that_used_to_hang():
    old = rb"\A(?:\s+|//[^\n]*\n|/\*.*?\*/)*\.version\s+\d+\.\d+"
    (problem,) = _check(old, re.DOTALL, {"match"}, budget=0.2)
    assert "CPU time" in problem


def test_the_check_finds_quadratic_search():
    (problem,) = _check(r"\s*x", 0, {"search"})
    assert "x the CPU time" in problem and "' ' * n" in problem
