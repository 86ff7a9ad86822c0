"""Packed token arrays: exact round trips, the chosen encodings, and refusal of bad input and bytes."""

import math
import random

import numpy as np
import pytest

from workers.atdp import pack_floats, pack_ids, pack_versions, unpack_floats, unpack_ids, unpack_versions

VOCAB = 151_936


@pytest.mark.parametrize(
    "ids",
    [
        [],
        [0],
        [127, 128, 16383, 16384, 2**21 - 1, 2**21],
        [2**32 - 1, 0, 2**31, 1],
        list(range(1000)),
        (lambda generator: [generator.randrange(VOCAB) for _ in range(4096)])(random.Random(3)),
    ],
    ids=["empty", "zero", "varint boundaries", "large", "small", "vocabulary"],
)
def test_ids_round_trip(ids):
    packed = pack_ids(ids)
    assert isinstance(packed, bytes)
    assert unpack_ids(packed) == ids
    assert len(packed) <= 1 + 4 * len(ids)


def test_ids_pick_the_smaller_encoding():
    small = [5, 17, 100] * 100
    assert pack_ids(small)[0] == 0x02
    assert len(pack_ids(small)) == 1 + 300
    large = [2**31 + position for position in range(100)]
    assert pack_ids(large)[0] == 0x01
    assert len(pack_ids(large)) == 1 + 400
    generator = random.Random(5)
    uniform = [generator.randrange(VOCAB) for _ in range(2000)]
    assert len(set(uniform)) > 1900
    assert 1 + 2 * 2000 < len(pack_ids(uniform)) <= 1 + 3 * 2000  # 2 bytes below 16384, 3 up to 2^21


def test_ids_accept_numpy_and_tuples():
    assert unpack_ids(pack_ids(np.array([1, 2, 3], dtype=np.int32))) == [1, 2, 3]
    assert unpack_ids(pack_ids((9, 8))) == [9, 8]


@pytest.mark.parametrize("bad", [[-1], [2**32], [1.5], ["7"], [[1, 2]], [2**64]])
def test_ids_refuse_values_outside_uint32(bad):
    with pytest.raises(
        ValueError, match=r"token ids must (lie in 0\.\.4294967295|be a flat sequence of int64 integers)"
    ):
        pack_ids(bad)


def test_unpack_refuses_bytes_of_another_kind_or_damaged():
    with pytest.raises(ValueError, match="pack_ids"):
        unpack_ids(pack_floats([0.5]))
    with pytest.raises(ValueError, match=r"not bytes written by pack_ids \(tag missing\)"):
        unpack_ids(b"")
    with pytest.raises(ValueError, match="multiple of 4"):
        unpack_ids(pack_ids([2**31] * 4)[:-1])
    with pytest.raises(ValueError, match="ends inside"):
        unpack_ids(bytes([0x02, 0x80]))
    with pytest.raises(ValueError, match="beyond uint32"):
        unpack_ids(bytes([0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]))
    with pytest.raises(ValueError, match="pack_versions"):
        unpack_versions(pack_ids([1]))


def test_floats_round_trip_float32_values_exactly():
    values = [0.0, -0.125, -1.5, -20.25, float(np.float32(-0.1)), float(np.finfo(np.float32).min)]
    assert unpack_floats(pack_floats(values)) == values
    assert unpack_floats(pack_floats([])) == []
    assert len(pack_floats(values)) == 1 + 4 * len(values)


def test_floats_keep_float32_precision():
    generator = random.Random(11)
    values = [-generator.expovariate(0.5) for _ in range(1000)]
    restored = unpack_floats(pack_floats(values))
    assert restored == [float(np.float32(value)) for value in values]
    assert all(abs(back - value) <= abs(value) * 2**-24 for back, value in zip(restored, values, strict=True))
    assert restored != values  # float64 detail really is dropped, as documented


def test_floats_keep_infinities_and_refuse_overflow():
    assert unpack_floats(pack_floats([-math.inf])) == [-math.inf]
    with pytest.raises(ValueError, match="float32 range"):
        pack_floats([-1e39])


@pytest.mark.parametrize(
    "versions",
    [
        [],
        [7],
        [7] * 5000,
        [-1] * 3 + [7] * 4 + [8] * 2,
        [3, -1, 3, -1],
        [-(2**63), 2**63 - 1, 0, -1],
    ],
    ids=["empty", "one", "long run", "context then versions", "alternating", "int64 extremes"],
)
def test_versions_round_trip(versions):
    assert unpack_versions(pack_versions(versions)) == versions


def test_versions_are_run_length_encoded():
    assert len(pack_versions([12] * 100_000)) <= 1 + 1 + 3
    assert len(pack_versions([4] * 500 + [5] * 500)) <= 1 + 2 * (1 + 2)


def test_versions_refuse_floats_and_corrupt_runs():
    with pytest.raises(ValueError, match="versions must be a flat sequence of int64 integers"):
        pack_versions([1.0, 2.0])
    with pytest.raises(ValueError, match="odd"):
        unpack_versions(bytes([0x04, 0x02]))
    with pytest.raises(ValueError, match="runs longer"):
        unpack_versions(bytes([0x04, 0x02]) + bytes([0xFF] * 8 + [0x01]))


def test_short_python_lists_pack_to_the_same_bytes_as_the_vectorized_path():
    """Lists of up to 128 Python ints take a plain loop (numpy's fixed costs dominate there); numpy arrays
    always take the vectorized path. Both must write identical bytes."""
    generator = random.Random(11)
    id_cases = [[], [0], [127, 128, 16383, 16384, 2**21], [2**32 - 1] * 3, [2**31] * 127 + [1]]
    id_cases += [
        [generator.randrange(limit) for _ in range(generator.randrange(129))] for limit in (200, VOCAB, 2**32)
    ]
    for ids in id_cases:
        assert pack_ids(ids) == pack_ids(np.array(ids, dtype=np.int64)), ids
    version_cases = [[], [0], [-1, -1, 3, 3, 3], [-(2**63), 2**63 - 1, 0, -1], [5] * 128]
    version_cases += [
        [generator.choice([-1, 0, 1, 2**40]) for _ in range(generator.randrange(129))] for _ in range(20)
    ]
    for versions in version_cases:
        assert pack_versions(versions) == pack_versions(np.array(versions, dtype=np.int64)), versions
    with pytest.raises(ValueError, match="int64"):
        pack_versions([2**63])
