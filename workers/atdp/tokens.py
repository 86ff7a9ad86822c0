"""Compact binary storage of token arrays: what the database keeps instead of JSON lists.

Every packed value starts with one tag byte naming its encoding, so readers can tell the encodings
apart, reject bytes packed by the wrong function, and a later version can add encodings:

| tag | function | payload |
| --- | --- | --- |
| 0x01 | pack_ids | uint32 little-endian, 4 bytes per id |
| 0x02 | pack_ids | unsigned LEB128 varints: 1 byte below 128, 2 below 16384, 3 below 2^21 |
| 0x03 | pack_floats | float32 little-endian, 4 bytes per value |
| 0x04 | pack_versions | run-length pairs (value as zigzag LEB128, run length as LEB128) |

`pack_ids` writes whichever of 0x01 and 0x02 is smaller (uint32 on a tie). With today's vocabularies
(under 2^21 ids) a varint id takes at most 3 bytes, and 2 below 16384, where BPE vocabularies keep
their most frequent tokens. Round trips are exact for ids in 0..2^32-1.

`pack_floats` keeps float32: a value comes back as the nearest float32 widened to a Python float, a
relative error of at most 2^-24 (about 6e-8; 6e-7 absolute at a logprob of -10). That is far below
what importance ratios and PPO clipping resolve, and it is the precision inference engines compute
logprobs in. Finite values beyond the float32 range are refused rather than turned into infinities.

`pack_versions` stores (value, run length) pairs: a completion produced by one policy is a handful of
bytes however long it is; an interrupted generation that spans versions adds one pair per change.
Values are any int64, negative included (the training view uses -1 for context tokens).

Encoding and decoding are vectorized with numpy, no Python loop per token, except that lists of up to
128 Python ints are packed in a plain loop (numpy's fixed cost per operation dominates at that size),
to the same bytes.
"""

import struct
from collections.abc import Sequence

import numpy as np

_TAG_UINT32 = 0x01
_TAG_VARINT = 0x02
_TAG_FLOAT32 = 0x03
_TAG_RUNS = 0x04
_UINT32_MAX = 2**32 - 1
_MAX_VARINT_BYTES = 10  # 64 bits at 7 bits a byte
_MAX_RUN_TOTAL = 2**31  # refuses corrupt run lengths before np.repeat allocates them


def pack_ids(ids: Sequence[int]) -> bytes:
    """Token ids (0..2^32-1) → bytes, in the smaller of uint32 and varint form."""
    if _short_python_ints(ids):
        return _pack_ids_short(ids)
    values = _as_int64(ids, "token ids")
    if values.size and (values.min() < 0 or values.max() > _UINT32_MAX):
        raise ValueError(f"token ids must lie in 0..{_UINT32_MAX}")
    unsigned = values.astype(np.uint64)
    varint_size = int(_varint_lengths(unsigned).sum())
    if varint_size < 4 * values.size:
        return bytes([_TAG_VARINT]) + _varint_encode(unsigned)
    return bytes([_TAG_UINT32]) + values.astype("<u4").tobytes()


def unpack_ids(data: bytes) -> list[int]:
    tag, payload = _split(data, (_TAG_UINT32, _TAG_VARINT), "pack_ids")
    if tag == _TAG_UINT32:
        if len(payload) % 4:
            raise ValueError("uint32 token ids: payload length is not a multiple of 4")
        return np.frombuffer(payload, dtype="<u4").tolist()
    values = _varint_decode(payload)
    if values.size and int(values.max()) > _UINT32_MAX:
        raise ValueError("varint token ids: value beyond uint32")
    return values.tolist()


def pack_floats(values: Sequence[float]) -> bytes:
    """Floats → float32 little-endian (see the module docstring for the precision this keeps)."""
    wide = np.asarray(values, dtype=np.float64).reshape(-1)
    with np.errstate(over="ignore"):
        narrow = wide.astype("<f4")
    if np.any(np.isinf(narrow) & np.isfinite(wide)):
        raise ValueError("a finite value lies beyond the float32 range")
    return bytes([_TAG_FLOAT32]) + narrow.tobytes()


def unpack_floats(data: bytes) -> list[float]:
    _, payload = _split(data, (_TAG_FLOAT32,), "pack_floats")
    if len(payload) % 4:
        raise ValueError("float32 values: payload length is not a multiple of 4")
    return np.frombuffer(payload, dtype="<f4").tolist()


def pack_versions(versions: Sequence[int]) -> bytes:
    """Policy versions (any int64) → run-length encoded bytes."""
    if _short_python_ints(versions):
        return _pack_versions_short(versions)
    values = _as_int64(versions, "versions")
    if not values.size:
        return bytes([_TAG_RUNS])
    run_starts = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate(([0], run_starts))
    lengths = np.diff(np.concatenate((starts, [values.size])))
    run_values = values[starts]
    zigzag = (run_values.astype(np.uint64) << np.uint64(1)) ^ (run_values >> 63).astype(np.uint64)
    pairs = np.empty(2 * starts.size, dtype=np.uint64)
    pairs[0::2] = zigzag
    pairs[1::2] = lengths.astype(np.uint64)
    return bytes([_TAG_RUNS]) + _varint_encode(pairs)


def unpack_versions(data: bytes) -> list[int]:
    _, payload = _split(data, (_TAG_RUNS,), "pack_versions")
    pairs = _varint_decode(payload)
    if pairs.size % 2:
        raise ValueError("run-length versions: odd number of varints")
    zigzag, lengths = pairs[0::2], pairs[1::2]
    if lengths.size and (int(lengths.max()) > _MAX_RUN_TOTAL or int(lengths.sum()) > _MAX_RUN_TOTAL):
        raise ValueError("run-length versions: runs longer than any token array")
    run_values = (zigzag >> np.uint64(1)).astype(np.int64) ^ -(zigzag & np.uint64(1)).astype(np.int64)
    return np.repeat(run_values, lengths.astype(np.int64)).tolist()


# ---------------------------------------------------------------------------------------------------


# A gateway step's arrays are mostly short, and numpy's fixed cost per operation (a few microseconds, some
# twenty operations per array) then outweighs a plain loop: the journal flusher packed every step's arrays on
# the web process. Up to this length, lists of Python ints are packed in Python, byte for byte the same.
_SHORT = 128


def _short_python_ints(values: Sequence[int]) -> bool:
    return (
        isinstance(values, (list, tuple))
        and len(values) <= _SHORT
        and all(type(value) is int for value in values)  # not bool, not numpy: those take the numpy path
    )


def _varint_bytes(values, out: bytearray) -> None:
    for value in values:
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)


def _pack_ids_short(ids: Sequence[int]) -> bytes:
    if ids and (min(ids) < 0 or max(ids) > _UINT32_MAX):
        raise ValueError(f"token ids must lie in 0..{_UINT32_MAX}")
    out = bytearray([_TAG_VARINT])
    _varint_bytes(ids, out)
    if len(out) - 1 < 4 * len(ids):
        return bytes(out)
    return bytes([_TAG_UINT32]) + struct.pack(f"<{len(ids)}I", *ids)


def _pack_versions_short(versions: Sequence[int]) -> bytes:
    if versions and (min(versions) < -(2**63) or max(versions) >= 2**63):
        raise ValueError("versions must be a flat sequence of int64 integers")
    runs: list[list[int]] = []  # [value, length]
    for value in versions:
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    out = bytearray([_TAG_RUNS])
    _varint_bytes(
        (number for value, length in runs for number in ((value << 1) ^ (value >> 63), length)), out
    )
    return bytes(out)


def _as_int64(values: Sequence[int], what: str) -> np.ndarray:
    array = np.asarray(values)
    if not array.size:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a flat sequence of int64 integers")
    if array.dtype == np.uint64 and array.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{what} must fit in int64")
    return array.astype(np.int64)


def _split(data: bytes, tags: tuple[int, ...], packer: str) -> tuple[int, memoryview]:
    view = memoryview(data).cast("B")
    if not view.nbytes or view[0] not in tags:
        raise ValueError(f"not bytes written by {packer} (tag {view[0] if view.nbytes else 'missing'})")
    return view[0], view[1:]


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    lengths = np.ones(values.size, dtype=np.int64)
    for group in range(1, _MAX_VARINT_BYTES):
        lengths += values >= np.uint64(1 << (7 * group))
    return lengths


def _varint_encode(values: np.ndarray) -> bytes:
    if not values.size:
        return b""
    lengths = _varint_lengths(values)
    owner = np.repeat(np.arange(values.size), lengths)
    starts = np.cumsum(lengths) - lengths
    group = np.arange(owner.size) - starts[owner]
    out = ((values[owner] >> (np.uint64(7) * group.astype(np.uint64))) & np.uint64(0x7F)).astype(np.uint8)
    out[group < lengths[owner] - 1] |= 0x80
    return out.tobytes()


def _varint_decode(payload) -> np.ndarray:
    data = np.frombuffer(payload, dtype=np.uint8)
    if not data.size:
        return np.zeros(0, dtype=np.uint64)
    if data[-1] & 0x80:
        raise ValueError("varint data ends inside a value")
    ends = np.flatnonzero((data & 0x80) == 0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > _MAX_VARINT_BYTES:
        raise ValueError("varint longer than 64 bits")
    group = np.arange(data.size) - np.repeat(starts, lengths)
    parts = (data & 0x7F).astype(np.uint64) << (np.uint64(7) * group.astype(np.uint64))
    return np.bitwise_or.reduceat(parts, starts)
