"""Lone surrogates in every string field of every API name the field.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import fairq


@pytest.mark.parametrize(
    "call",
    [
        lambda: fairq.DualPhaseQueue().add("r", None, "\ud800"),
        lambda: fairq.DualPhaseQueue().ids("\ud800"),
        lambda: fairq.DualPhaseQueue().len("\ud800"),
        lambda: fairq.DRRQueue().push(1, "\ud800", 1),
        lambda: fairq.DRRQueue().deficit("\ud800"),
        lambda: fairq.D2LPM(2, 1.0).dispatch(1, "\ud800", [1]),
        lambda: fairq.D2LPM(2, 1.0).deficit("\ud800", 0),
        lambda: fairq.RadixTree().match([1], "\ud800"),
    ],
)
def test_lone_surrogate_strings_name_the_field(call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError) as ei:
        call()
    msg = str(ei.value)
    assert any(f in msg for f in ("phase", "class_name", "client", "namespace", "request_id")), msg
