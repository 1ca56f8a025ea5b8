"""The panic record: where a Rust kernel built by ptxbridge writes the first panic of a launch.

ptxbridge's panic handler (:mod:`ptxbridge.rust.panic_runtime`, linked into a crate that has no
``#[panic_handler]`` of its own) claims the record with an atomic compare-and-swap of ``state``
(0 free, 1 being written, 2 written), fills it, and ends the thread with PTX ``exit`` (no
``trap``: the CUDA context survives).  The call path reads it after the launch and raises
:class:`~ptxbridge.abi.errors.KernelRaisedError`.  The layout is ``#[repr(C)]``, little-endian::

    offset  size  field
         0     4  state            u32
         4     4  line             u32
         8     4  column           u32
        12    12  block            [u32; 3]   (%ctaid.x/y/z of the panicking thread)
        24    12  thread           [u32; 3]   (%tid.x/y/z)
        36     4  message_len      u32        (the message's length; kept: its first 256 bytes)
        40     4  file_len         u32
        44   256  message          [u8; 256]  (UTF-8, the formatted panic message)
       300   128  file             [u8; 128]  (UTF-8, Location::file())
       432     8  file_address     usize      (``panic_messages="location"``: where the file name is)

Built with ``rust.compile(panic_messages="location")`` the handler keeps no message
(``message_len`` is :data:`NOT_KEPT`) and leaves the file name, a static string of the image, where
it is (``file_address``, ``file_len`` bytes); the call path reads it from the image's globals.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FILE", "MESSAGE", "NOT_KEPT", "NOT_KEPT_MESSAGE", "SIZE", "SYMBOL", "WRITTEN", "PanicRecord",
           "read_record"]

SYMBOL = "__ptxbridge_panic"
MESSAGE, FILE = 256, 128
_HEAD = struct.Struct("<3I3I3I2I")
_FILE_ADDRESS = struct.Struct("<Q")
_FILE_ADDRESS_AT = -(-(_HEAD.size + MESSAGE + FILE) // 8) * 8
SIZE = _FILE_ADDRESS_AT + _FILE_ADDRESS.size
WRITTEN = 2
NOT_KEPT = 0xFFFF_FFFF  # message_len of a record written without its message
NOT_KEPT_MESSAGE = '(message not kept: compiled with panic_messages="location")'


@dataclass(frozen=True, slots=True)
class PanicRecord:
    """One decoded record: what panicked where, and which thread."""

    message: str
    file: str
    line: int
    column: int
    block: tuple[int, int, int]
    thread: tuple[int, int, int]

    @property
    def location(self) -> str:
        """``file:line:col`` as rustc prints it."""
        return f"{self.file}:{self.line}:{self.column}" if self.file else "an unknown location"


def read_record(data: bytes, read_static: Callable[[int, int], bytes | None] = lambda _a, _n: None,
                ) -> PanicRecord | None:
    """The panic in ``data`` (the record's bytes), or None when no thread panicked.  ``read_static``
    reads ``(address, length)`` bytes of the image's static data (None where it has none): the file
    name of a record written without its message."""
    if len(data) < SIZE:
        return None
    state, line, column, bx, by, bz, tx, ty, tz, message_len, file_len = _HEAD.unpack_from(data)
    if state != WRITTEN:
        return None
    start = _HEAD.size
    if message_len == NOT_KEPT:
        message = NOT_KEPT_MESSAGE
        (address,) = _FILE_ADDRESS.unpack_from(data, _FILE_ADDRESS_AT)
        file = (read_static(address, file_len) or b"").decode("utf-8", "replace")
        return PanicRecord(message, file, line, column, (bx, by, bz), (tx, ty, tz))
    message = data[start:start + min(message_len, MESSAGE)].decode("utf-8", "replace")
    if message_len > MESSAGE:  # the handler counts what it could not keep
        message += "..."
    file = data[start + MESSAGE:start + MESSAGE + min(file_len, FILE)].decode("utf-8", "replace")
    return PanicRecord(message, file, line, column, (bx, by, bz), (tx, ty, tz))
