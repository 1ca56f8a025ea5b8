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
panic runs none of it.  The crate is built once into the private sysroot (:mod:`.toolchain`).
"""

from __future__ import annotations

from ptxbridge.abi import panic_record
from ptxbridge.rust.syntax import RustSource

__all__ = ["CRATE", "MEM_CRATE", "MEM_SOURCE", "SOURCE", "handled_by_crate"]

CRATE = "ptxbridge_panic"
MEM_CRATE = "ptxbridge_mem"

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

SOURCE = f"""\
#![no_std]
#![feature(stdarch_nvptx, asm_experimental_arch, linkage)]
// ptxbridge's panic handler; the record's layout: ptxbridge/abi/panic_record.py
use core::arch::nvptx::*;
use core::fmt::Write;
use core::sync::atomic::{{AtomicU32, Ordering}};

#[repr(C)]
pub struct Record {{
    state: AtomicU32,
    line: u32,
    column: u32,
    block: [u32; 3],
    thread: [u32; 3],
    message_len: u32,
    file_len: u32,
    message: [u8; {panic_record.MESSAGE}],
    file: [u8; {panic_record.FILE}],
}}

#[unsafe(no_mangle)]
#[linkage = "weak"]
pub static mut {panic_record.SYMBOL}: Record = Record {{
    state: AtomicU32::new(0), line: 0, column: 0, block: [0; 3], thread: [0; 3], message_len: 0,
    file_len: 0, message: [0; {panic_record.MESSAGE}], file: [0; {panic_record.FILE}],
}};

/// Keeps what fits, counts everything (the reader marks a cut message).
struct Text<'a> {{ bytes: &'a mut [u8], len: usize }}

impl Write for Text<'_> {{
    fn write_str(&mut self, s: &str) -> core::fmt::Result {{
        for &b in s.as_bytes() {{
            if let Some(slot) = self.bytes.get_mut(self.len) {{ *slot = b; }}
            self.len += 1;
        }}
        Ok(())
    }}
}}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {{
    let record = unsafe {{ &mut *core::ptr::addr_of_mut!({panic_record.SYMBOL}) }};
    if record.state.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed).is_ok() {{
        let mut message = Text {{ bytes: &mut record.message, len: 0 }};
        let _ = write!(message, "{{}}", info.message());
        record.message_len = message.len as u32;
        if let Some(at) = info.location() {{
            let mut file = Text {{ bytes: &mut record.file, len: 0 }};
            let _ = file.write_str(at.file());
            record.file_len = file.len.min({panic_record.FILE}) as u32;
            record.line = at.line();
            record.column = at.column();
        }}
        unsafe {{
            record.block = [_block_idx_x() as u32, _block_idx_y() as u32, _block_idx_z() as u32];
            record.thread = [_thread_idx_x() as u32, _thread_idx_y() as u32, _thread_idx_z() as u32];
        }}
        // a swap, not a store: libNVVM's LLVM 7 (LTO-IR below sm_100) has no atomic store
        record.state.swap({panic_record.WRITTEN}, Ordering::Release);
    }}
    // end this thread only: the launch completes and the context stays usable
    unsafe {{ core::arch::asm!("exit;", options(noreturn)) }}
}}
"""


def handled_by_crate(units: list[RustSource]) -> bool:
    """Whether the crate brings its own ``#[panic_handler]`` (then it keeps it)."""
    return any(fn.attr("panic_handler") is not None for unit in units for fn in unit.functions)
