"""fairq._core.as_tokens (every API's token reader) under hostile input.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given

from fairq._core import as_tokens

from fuzz.hostile import (
    FUZZ,
    Boom,
    attempt,
    hostile,
    must_fail,
)


@FUZZ
@given(v=hostile)
def test_as_tokens_hostile(v: Any) -> None:
    ok, r = attempt(lambda: None, as_tokens, v, "prompt_ids", user_exc=True)
    if ok:
        assert isinstance(r, list) and all(isinstance(t, int) and 0 <= t < 2**32 for t in r)
    elif not isinstance(r, Boom) and isinstance(r, ValueError):
        assert "prompt_ids" in str(r)


@pytest.mark.parametrize(
    "v",
    [b"\x01\x02\x03", np.array([1.5]), np.zeros((2, 2), dtype=np.int64), [1, -1], [2**64]],
)
def test_as_tokens_names_field(v: Any) -> None:
    must_fail(lambda: None, as_tokens, v, "prompt_ids", field="prompt_ids")
