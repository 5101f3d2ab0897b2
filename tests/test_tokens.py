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
