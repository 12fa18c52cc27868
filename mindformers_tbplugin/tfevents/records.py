"""TFRecord framing of event files, both ways: the only module that knows the record layout.

A record is ``uint64 length | masked CRC32C of the length | payload | masked CRC32C of the payload``
(little endian). Reading distinguishes how a file can end short: a *torn* tail (the last record is
incomplete, normal while a writer appends) from a *corrupt* one (a checksum does not match).
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

try:  # C implementation; the pure-Python fallback holds the GIL ~100x longer per record.
    from google_crc32c import value as crc32c
except ImportError:  # pragma: no cover - exercised only without the optional wheel
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c

HEADER_BYTES = 12  # uint64 length + its masked CRC32C
FOOTER_BYTES = 4  # masked CRC32C of the payload
CHUNK_BYTES = 1 << 20  # read size: memory stays flat whatever the file size
TORN, CORRUPT = "torn", "corrupt"
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_pack_u64 = struct.Struct("<Q").pack
_pack_u32 = struct.Struct("<I").pack
_unpack_u64 = struct.Struct("<Q").unpack_from
_unpack_u32 = struct.Struct("<I").unpack_from

Span = tuple[int, int, bool]  # payload start, payload stop (in the buffer), payload checksum matches


def masked_crc(data: bytes) -> int:
    """CRC32C rotated and offset, as TFRecord stores it (a CRC of data holding CRCs stays useful)."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def frame_record(payload: bytes) -> bytes:
    """One record holding ``payload``."""
    header = _pack_u64(len(payload))
    return header + _pack_u32(masked_crc(header)) + payload + _pack_u32(masked_crc(payload))


def frame_payloads(payloads: np.ndarray) -> bytes:
    """Records holding each row of ``payloads`` (uint8, one payload of the same length per row), as
    :func:`frame_record` frames them one by one: the header and its checksum are the same for all."""
    count, length = payloads.shape
    header = _pack_u64(length)
    rows = np.empty((count, HEADER_BYTES + length + FOOTER_BYTES), dtype=np.uint8)
    rows[:, :HEADER_BYTES] = np.frombuffer(header + _pack_u32(masked_crc(header)), dtype=np.uint8)
    rows[:, HEADER_BYTES:-FOOTER_BYTES] = payloads
    data = payloads.tobytes()  # crc32c takes bytes, not views; slicing bytes is cheap
    crcs = np.fromiter((crc32c(data[at : at + length]) for at in range(0, len(data), length)), np.uint64, count)
    masked = ((((crcs >> 15) | (crcs << 17)) & _U32) + _MASK_DELTA) & _U32
    rows[:, -FOOTER_BYTES:] = masked.astype("<u4").view(np.uint8).reshape(count, FOOTER_BYTES)
    return rows.tobytes()


def split_records(buf: bytes) -> tuple[list[Span], int, str | None]:
    """The complete records at the start of ``buf``: (their spans, the bytes they take, what follows
    them: None for nothing, TORN for an incomplete record, CORRUPT for a header failing its checksum).

    A payload failing its checksum is still framed by its header: its span says so and the next
    record is found, so each reader decides whether to skip it or stop.
    """
    spans: list[Span] = []
    pos, end = 0, len(buf)
    checked = b""  # the last header that passed: writers repeat one header for records of one length
    length = 0
    while pos + HEADER_BYTES <= end:
        header = buf[pos : pos + HEADER_BYTES]
        if header != checked:
            (length,) = _unpack_u64(header)
            if masked_crc(header[:8]) != _unpack_u32(header, 8)[0]:
                return spans, pos, CORRUPT
            checked = header
        start = pos + HEADER_BYTES
        stop = start + length
        if stop + FOOTER_BYTES > end:
            return spans, pos, TORN
        crc = crc32c(buf[start:stop])  # masked_crc inlined: this loop runs once per record
        masked = ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32
        spans.append((start, stop, masked == _unpack_u32(buf, stop)[0]))
        pos = stop + FOOTER_BYTES
    return spans, pos, TORN if pos < end else None


class RecordReader:
    """The records appended to one file since the previous pass, read in bounded chunks.

    After a pass, ``offset`` is the end of the last complete record and ``problem`` says what follows
    it: None (the end of the file), TORN (left for the next pass) or CORRUPT (nothing after a bad
    header can be framed, so the file is not read again).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.offset = 0
        self.problem: str | None = None

    def chunks(self) -> Iterator[tuple[int, bytes, list[Span]]]:
        """Per chunk holding complete records: (its offset in the file, its bytes, the records' spans)."""
        if self.problem == CORRUPT:
            return
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size < self.offset:  # the file was replaced: start over
            self.offset = 0
        self.problem = None
        want = CHUNK_BYTES
        with open(self.path, "rb") as handle:
            while self.offset < size:
                handle.seek(self.offset)
                buf = handle.read(want)
                spans, used, problem = split_records(buf)
                base = self.offset
                self.offset += used
                if spans:
                    yield base, buf, spans
                if len(buf) < want or problem == CORRUPT:  # the file ends here, or cannot be framed further
                    self.problem = problem
                    return
                # A record larger than a chunk is read whole on the next round.
                want = CHUNK_BYTES if used else max(CHUNK_BYTES, HEADER_BYTES + _unpack_u64(buf, 0)[0] + FOOTER_BYTES)


# Where a record may start in a tail read from an arbitrary offset: a length below 64 KiB (its six high
# bytes zero) and an Event payload, whose first field is wall_time (key 0x09). The header's checksum then
# decides, and the records must chain from there.
_RECORD_START = re.compile(rb"(?=(?s:..\x00{6}.{4}\x09))")


def tail_payloads(path: str | os.PathLike, max_bytes: int) -> list[bytes]:
    """The payloads (checksums matching) of the complete records in the last ``max_bytes`` of a file,
    in file order, without reading the rest: the first record start found in that window from which
    the headers chain to the end (or to a torn tail)."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        handle.seek(start)
        buf = handle.read(size - start)
    offsets = [0] if start == 0 else (match.start() for match in _RECORD_START.finditer(buf))
    for offset in offsets:
        if start and masked_crc(buf[offset : offset + 8]) != _unpack_u32(buf, offset + 8)[0]:
            continue
        window = buf[offset:] if offset else buf
        spans, _, problem = split_records(window)
        if start == 0 or (spans and problem != CORRUPT):
            return [window[a:b] for a, b, intact in spans if intact]
    return []
