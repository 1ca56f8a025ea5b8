"""The emulator's body parser: statements, scopes, labels, operands and line numbers."""

from __future__ import annotations

import pytest

from ptxbridge.abi.errors import FormatError
from ptxbridge.loaders.emulator.parse import Group, Imm, Mem, Not, Pair, Reg, Sink, Sym, Vec, parse_body

BODY = """
	.reg .pred 	%p<2>;
	.reg .b32 	%r<3>;
	.local .align 8 .b8 	__local_depot0[24];
	mov.u32 	%r1, %tid.x;
	@!%p1 bra 	$L__BB0_2;
	{ // callseq 0
	.param .b32 param0;
	st.param.b32 	[param0+0], %r1;
	call.uni (retval0),
	f,
	(
	param0
	);
	}
	{ .param .b64 param0; st.param.b64 [param0], %r1; }
$L__BB0_2: ld.global.v2.u32 	{%r1, _}, [%r2+-8];
	setp.lt.and.s32 %p0|%p1, %r1, 0x10, !%p0;
	ret;
"""


def test_statements_labels_and_line_numbers():
    body = parse_body(BODY, 10, "<t>", "k")
    opcodes = [(ins.opcode, ins.line) for ins in body.instructions]
    assert opcodes == [("mov", 14), ("bra", 15), ("st", 18), ("call", 19), ("st", 25), ("ld", 26),
                       ("setp", 27), ("ret", 28)]
    assert body.labels == {"$L__BB0_2": 5}
    assert body.registers["%p1"] == "pred" and body.registers["%r2"] == "b32" and "%r3" not in body.registers


def test_scopes_give_each_call_sequence_its_own_params():
    body = parse_body(BODY, 1, "<t>", "k")
    first, second = body.instructions[2].operands[0], body.instructions[4].operands[0]
    assert isinstance(first, Mem) and isinstance(second, Mem)
    assert first.base.name != second.base.name
    sizes = {v.name: (v.space, v.size) for v in body.variables}
    assert sizes[first.base.name] == ("param", 4) and sizes[second.base.name] == ("param", 8)
    assert sizes["__local_depot0"] == ("local", 24)


def test_operand_forms():
    ins = parse_body(BODY, 1, "<t>", "k").instructions
    assert ins[1].guard == Reg("%p1") and ins[1].guard_negated and ins[1].operands == (Sym("$L__BB0_2"),)
    call = ins[3].operands
    assert isinstance(call[0], Group) and call[1] == Sym("f") and isinstance(call[2], Group)
    assert ins[5].mods == ("global", "v2", "u32")
    assert ins[5].operands == (Vec((Reg("%r1"), Sink())), Mem(Reg("%r2"), -8))
    assert ins[6].operands == (Pair(Reg("%p0"), Reg("%p1")), Reg("%r1"), Imm("0x10"), Not(Reg("%p0")))


@pytest.mark.parametrize(("text", "message"), [
    ("mov.u32 %r1, 1", "without ';'"),
    ("{ mov.u32 %r1, 1;", "without a matching '}'"),
    ("}", "without a matching '{'"),
    ("L: ret; L: ret;", "defined twice"),
])
def test_malformed_bodies_name_the_line(text, message):
    with pytest.raises(FormatError, match=message) as err:
        parse_body("\n" + text, 7, "file.ptx", "k")
    assert err.value.where == "line 8" and err.value.source == "file.ptx"


def test_valid_but_unimplemented_declarations_are_unsupported_not_malformed():
    from ptxbridge.abi.errors import UnsupportedInstructionError

    with pytest.raises(UnsupportedInstructionError, match=r"^k, PTX line 8: declaration \.tex is not"):
        parse_body("\n.tex .u64 t;", 7, "file.ptx", "k")
    body = parse_body("L: ret;\np: .callprototype (.param .b32 _) _ (.param .b64 _);\nret;", 1, "f.ptx", "k")
    assert [i.opcode for i in body.instructions] == ["ret", "ret"]  # a prototype only describes a call
