"""Token-id input normalisation shared by every token-taking API."""

from __future__ import annotations

import numpy as np
import pytest

from fairq._core import as_tokens


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, 3],
        (1, 2, 3),
        np.array([1, 2, 3], dtype=np.uint32),
        np.array([1, 2, 3], dtype=np.int64),
        np.array([1, 2, 3], dtype=np.uint16),
        np.array([1, 2, 3], dtype=">u4"),
        np.array([1, 2, 3], dtype=np.uint32).tobytes(),
        range(1, 4),
    ],
)
def test_accepted_forms(value: object) -> None:
    assert as_tokens(value) == [1, 2, 3]


def test_numpy_strided_view() -> None:
    a = np.arange(10, dtype=np.uint32)[::2]
    assert as_tokens(a) == [0, 2, 4, 6, 8]


def test_empty() -> None:
    assert as_tokens([]) == []
    assert as_tokens(np.array([], dtype=np.int32)) == []


@pytest.mark.parametrize(
    "value, exc, msg",
    [
        ([1, -1], ValueError, "tokens[1] = -1"),
        ([2**32], ValueError, "tokens[0] = 4294967296"),
        (np.array([3, -5]), ValueError, "tokens[1] = -5"),
        (np.array([2**33]), ValueError, "tokens[0]"),
        (["a"], TypeError, "tokens[0] must be an int"),
        ("abc", TypeError, "got str"),
        (np.zeros((2, 2), dtype=np.uint32), ValueError, "1-D"),
        (np.array([1.0]), TypeError, "integer dtype"),
        (b"abc", ValueError, "divisible by 4"),
        (3, TypeError, "must be a list of ints"),
    ],
)
def test_rejected_with_field_name(value: object, exc: type[Exception], msg: str) -> None:
    with pytest.raises(exc) as info:
        as_tokens(value)
    assert msg in str(info.value)


def test_custom_field_name() -> None:
    with pytest.raises(ValueError, match=r"prompt\[0\]"):
        as_tokens([-1], "prompt")


# ------------------------------------------------- memoryview / array / bool

import array  # noqa: E402

U32 = np.array([1, 2, 3], dtype=np.uint32)


@pytest.mark.parametrize(
    "value",
    [
        memoryview(U32),  # format 'I'
        memoryview(U32.tobytes()),  # raw bytes 'B': native uint32 like bytes
        memoryview(bytearray(U32.tobytes())),
        memoryview(U32.tobytes()).cast("b"),
        memoryview(U32.tobytes()).cast("c"),
        memoryview(U32.tobytes()).cast("@I"),
        memoryview(U32.tobytes()).cast("I"),
        memoryview(np.array([1, 2, 3], dtype=np.int64)),  # other int formats
        memoryview(np.array([1, 2, 3], dtype=np.uint16)),
        memoryview(np.array([1, 2, 3], dtype=">u4")),  # explicit big-endian
        memoryview(np.array([1, 2, 3], dtype="<i8")),
        memoryview(np.array([9, 1, 9, 2, 9, 3], dtype=np.uint32))[1::2],  # strided
        array.array("I", [1, 2, 3]),
        array.array("L", [1, 2, 3]),
        array.array("B", [1, 2, 3]),  # array 'B' holds ints, not raw bytes
        array.array("b", [1, 2, 3]),
        array.array("h", [1, 2, 3]),
        array.array("H", [1, 2, 3]),
        array.array("i", [1, 2, 3]),
        array.array("l", [1, 2, 3]),
        array.array("q", [1, 2, 3]),
        array.array("Q", [1, 2, 3]),
    ],
)
def test_memoryview_and_array_forms(value: object) -> None:
    assert as_tokens(value) == [1, 2, 3]


def test_memoryview_bytes_reads_uint32_not_bytes() -> None:
    """Regression: a memoryview of bytes was iterated byte by byte."""
    raw = np.array([70000, 5], dtype=np.uint32).tobytes()
    assert as_tokens(memoryview(raw)) == [70000, 5]
    assert as_tokens(memoryview(raw)) == as_tokens(raw)


def test_uint32_extremes_and_empty() -> None:
    top = [0, 2**32 - 1]
    assert as_tokens(array.array("I", top)) == top
    assert as_tokens(memoryview(np.array(top, dtype=np.uint32))) == top
    assert as_tokens(array.array("Q", top)) == top
    assert as_tokens(array.array("I")) == []
    assert as_tokens(memoryview(b"")) == []


@pytest.mark.parametrize(
    "value, exc, msg",
    [
        (array.array("i", [1, -2]), ValueError, "tokens[1] = -2"),
        (array.array("q", [2**32]), ValueError, "tokens[0] = 4294967296"),
        (array.array("Q", [2**64 - 1]), ValueError, "tokens[0] = 18446744073709551615"),
        (array.array("b", [0, 0, -1]), ValueError, "tokens[2] = -1"),
        (memoryview(np.array([5, -7], dtype=np.int16)), ValueError, "tokens[1] = -7"),
        (memoryview(np.array([1, -1], dtype=">i8")), ValueError, "tokens[1] = -1"),
        (array.array("d", [1.0]), TypeError, "integer typecode"),
        (array.array("f", [1.0]), TypeError, "integer typecode"),
        (array.array("u", "ab"), TypeError, "integer typecode"),
        (memoryview(np.array([1.0])), TypeError, "integer format"),
        (memoryview(np.array([True])), TypeError, "bool"),
        (memoryview(b"abc"), ValueError, "divisible by 4"),
        (memoryview(np.zeros((2, 2), dtype=np.uint32)), ValueError, "1-D"),
        ([True], TypeError, "tokens[0] must be an int token id, got bool"),
        ([1, 2, False], TypeError, "tokens[2]"),
        ((1, True), TypeError, "tokens[1]"),
        (iter([3, True]), TypeError, "tokens[1]"),
        (np.array([True, False]), TypeError, "bool"),
    ],
)
def test_rejected_buffers_and_bools(value: object, exc: type[Exception], msg: str) -> None:
    with pytest.raises(exc) as info:
        as_tokens(value)
    assert msg in str(info.value)


def test_int_like_items_still_accepted() -> None:
    class Idx:
        def __index__(self) -> int:
            return 7

    class MyInt(int):
        pass

    assert as_tokens([np.int64(5), Idx(), MyInt(9), 0, 1]) == [5, 7, 9, 0, 1]


def test_list_mutated_by_index_is_safe() -> None:
    """An item's __index__ may mutate the list being read: the result is the
    list as it was when the call started, never a crash."""
    lst: list[object] = []

    class Evil:
        def __index__(self) -> int:
            lst.clear()
            return 4

    lst.extend([1, Evil(), 2, 3])
    assert as_tokens(lst) == [1, 4, 2, 3]
