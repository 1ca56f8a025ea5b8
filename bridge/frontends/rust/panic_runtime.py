"""The crates ptxbridge links into Rust kernels: its ``#[panic_handler]`` (``ptxbridge_panic``) and the C
memory routines rustc calls (``ptxbridge_mem``).

A crate with no panic handler of its own is compiled with ``--extern force:ptxbridge_panic=...``
(:func:`ptxbridge.rust.frontend.compile`), which links this crate although the kernel never names it.
Its handler writes the first panic of a launch into the record :mod:`ptxbridge.abi.panic_record`
describes (a ``.weak .global``, so several Rust artifacts in one image share one record) and ends
the thread with PTX ``exit``: the other threads run on, the launch completes, and the context
survives, which ``trap`` (cuda-oxide's panics, a ``loop {}`` handler hangs instead) would not allow.

The message is formatted with ``core::fmt`` into the record (``index out of bounds: the len is 4
but the index is 9``); that code is reached only from the panic path, so a thread that does not
panic runs none of it, but ptxas sizes the registers of every kernel that can panic for it (the
formatters are called through pointers): 70 registers for a bounds-checked axpy whose unchecked twin
needs 10, which halves its occupancy, unless the link caps them (``Artifact.register_cap``, measured
with the other handler).  ``rust.compile(panic_messages="location")`` links the other
handler, ``ptxbridge_panic_location``: it never reads the message, so rustc drops each panic site's
formatting arguments and no formatter is linked; the record keeps where and which thread.  A
handler that reads any part of the message (even ``as_str()``) keeps every formatter alive.  Both
crates are built once into the private sysroot (:mod:`.toolchain`).
"""

from __future__ import annotations

from ptxbridge.abi import panic_record
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.rust.syntax import RustSource

__all__ = ["CRATE", "LOCATION_CRATE", "MEM_CRATE", "MEM_SOURCE", "PANIC_MESSAGES", "SOURCES",
           "handled_by_crate", "panic_crate"]

CRATE = "ptxbridge_panic"  # the message formatted with core::fmt (``panic_messages="full"``)
LOCATION_CRATE = "ptxbridge_panic_location"  # where and who only (``"location"``)
MEM_CRATE = "ptxbridge_mem"
PANIC_MESSAGES = ("full", "location")

MEM_SOURCE = """\
#![no_std]
#![feature(linkage)]
// C's memcmp and bcmp, which rustc calls for slice and str comparisons (see panic_runtime.py)
#[unsafe(no_mangle)]
#[linkage = "weak"]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return x as i32 - y as i32;
        }
        i += 1;
    }
    0
}

#[unsafe(no_mangle)]
#[linkage = "weak"]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    unsafe { memcmp(a, b, n) }
}
"""

_RECORD = r"""#![no_std]
#![feature(stdarch_nvptx, asm_experimental_arch, linkage)]
// ptxbridge's panic handler; the record's layout: ptxbridge/abi/panic_record.py
use core::arch::nvptx::*;
use core::fmt::Write;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU32, Ordering};

#[repr(C)]
pub struct Record {
    state: AtomicU32,
    line: u32,
    column: u32,
    block: [u32; 3],
    thread: [u32; 3],
    message_len: u32,
    file_len: u32,
    message: [u8; @MESSAGE@],
    file: [u8; @FILE@],
    file_address: usize,
}

#[unsafe(no_mangle)]
#[linkage = "weak"]
pub static mut @SYMBOL@: Record = Record {
    state: AtomicU32::new(0), line: 0, column: 0, block: [0; 3], thread: [0; 3], message_len: 0,
    file_len: 0, message: [0; @MESSAGE@], file: [0; @FILE@], file_address: 0,
};

/// Keeps what fits, counts everything (the reader marks a cut message).
struct Text<'a> { bytes: &'a mut [u8], len: usize }

impl Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for &b in s.as_bytes() {
            if let Some(slot) = self.bytes.get_mut(self.len) { *slot = b; }
            self.len += 1;
        }
        Ok(())
    }
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    let record = unsafe { &mut *core::ptr::addr_of_mut!(@SYMBOL@) };
    if record.state.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        if let Some(at) = info.location() {
            keep_where(record, at);
            record.line = at.line();
            record.column = at.column();
        }
        keep_message(record, info);
        unsafe {
            record.block = [_block_idx_x() as u32, _block_idx_y() as u32, _block_idx_z() as u32];
            record.thread = [_thread_idx_x() as u32, _thread_idx_y() as u32, _thread_idx_z() as u32];
        }
        // a swap, not a store: libNVVM's LLVM 7 (LTO-IR below sm_100) has no atomic store
        record.state.swap(@WRITTEN@, Ordering::Release);
    }
    // end this thread only: the launch completes and the context stays usable
    unsafe { core::arch::asm!("exit;", options(noreturn)) }
}
"""

_FULL = r"""
fn keep_where(record: &mut Record, at: &core::panic::Location) {
    let mut file = Text { bytes: &mut record.file, len: 0 };
    let _ = file.write_str(at.file());
    record.file_len = file.len.min(@FILE@) as u32;
}

fn keep_message(record: &mut Record, info: &PanicInfo) {
    let mut message = Text { bytes: &mut record.message, len: 0 };
    let _ = write!(message, "{}", info.message());
    record.message_len = message.len as u32;
}
"""

# No loop, no formatting: info.message() is never read, so rustc drops each panic site's formatting
# arguments (and every formatter) with it, and the file name (a static string) is left where it is
# for the host to read.  A copy loop here, unrolled, would cost every kernel that can panic dozens
# of registers in nvJitLink's relocatable compile.
_LOCATION = r"""
fn keep_where(record: &mut Record, at: &core::panic::Location) {
    record.file_address = at.file().as_ptr() as usize;
    record.file_len = at.file().len() as u32;
}

fn keep_message(record: &mut Record, _: &PanicInfo) {
    record.message_len = @NOT_KEPT@;
}
"""


def _fill(template: str) -> str:
    """The Rust source with the record's constants (:mod:`ptxbridge.abi.panic_record`) written in."""
    for token, value in (("@SYMBOL@", panic_record.SYMBOL), ("@MESSAGE@", panic_record.MESSAGE),
                         ("@FILE@", panic_record.FILE), ("@WRITTEN@", panic_record.WRITTEN),
                         ("@NOT_KEPT@", panic_record.NOT_KEPT)):
        template = template.replace(token, str(value))
    return template


SOURCES = {CRATE: _fill(_RECORD + _FULL), LOCATION_CRATE: _fill(_RECORD + _LOCATION)}


def panic_crate(panic_messages: str) -> str:
    """The handler crate for ``rust.compile(panic_messages=...)`` (ArgumentError for another value)."""
    if panic_messages not in PANIC_MESSAGES:
        raise ArgumentError(f"rust.compile: panic_messages must be one of {PANIC_MESSAGES} "
                            f"(got {panic_messages!r})")
    return CRATE if panic_messages == "full" else LOCATION_CRATE


def handled_by_crate(units: list[RustSource]) -> bool:
    """Whether the crate brings its own ``#[panic_handler]`` (then it keeps it)."""
    return any(fn.attr("panic_handler") is not None for unit in units for fn in unit.functions)
