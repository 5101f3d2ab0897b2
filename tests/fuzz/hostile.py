"""The hostile-input suite's one shared helper: hostile values and the checks.

:func:`attempt` / :func:`must_fail` call an API and, when the call fails,
check the exception (documented type, names the field) and that a snapshot of
the object is unchanged; see :mod:`fuzz`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from fairq import QueueFull

ALLOWED: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    QueueFull,
)


FUZZ = settings(max_examples=150, deadline=None)


class Boom(Exception):
    """Raised by hostile objects; a user exception that must propagate as is."""


class RaisingAttrs:
    """Every attribute access raises a user exception."""

    def __getattr__(self, name: str) -> Any:
        raise Boom(f"attribute {name} exploded")


class Bare:
    """An object with no attributes at all."""

    __slots__ = ()


class Unhashable:
    __hash__ = None  # type: ignore[assignment]


class FlakyHash:
    """Hashes fine until armed; then the ``fail_on``-th hash call raises."""

    def __init__(self, fail_on: int = 2) -> None:
        self.armed = False
        self.calls = 0
        self.fail_on = fail_on

    def __hash__(self) -> int:
        if self.armed:
            self.calls += 1
            if self.calls == self.fail_on:
                raise Boom("hash exploded")
        return 12345

    def __eq__(self, other: object) -> bool:
        return other is self


class BadIndex:
    """Pretends to be an int via __index__, which raises."""

    def __index__(self) -> int:
        raise Boom("__index__ exploded")


class BadFloat:
    def __float__(self) -> float:
        raise Boom("__float__ exploded")


class BadIter:
    def __iter__(self) -> Any:
        yield "a"
        raise Boom("iteration exploded")


class BadBool:
    def __bool__(self) -> bool:
        raise Boom("__bool__ exploded")


def hostile_values() -> list[Any]:
    """Fresh hostile values (fresh objects each call)."""
    return [
        math.nan,
        math.inf,
        -math.inf,
        -1,
        0,
        -1.0,
        0.0,
        1.5,
        2**31,
        2**63,
        2**64,
        2**200,
        -(2**200),
        1e308,
        5e-324,
        True,
        False,
        None,
        "",
        "x",
        "\ud800",
        b"\x01\x02\x03",
        b"",
        bytearray(b"\x00" * 5),
        [],
        [1, -1],
        [2**40],
        [1.5],
        ["a"],
        [None],
        {},
        {"a": 1},
        set(),
        (1, 2),
        np.array([1.5, 2.0]),
        np.zeros((2, 2), dtype=np.int64),
        np.array(3),
        np.array([-1], dtype=np.int64),
        np.array([2**40], dtype=np.int64),
        np.array([1, 2], dtype=np.uint8),
        np.array([True, False]),
        np.array(["a"]),
        np.array([1, None], dtype=object),
        np.float64("nan"),
        np.int64(-5),
        RaisingAttrs(),
        Bare(),
        Unhashable(),
        BadIndex(),
        BadFloat(),
        BadIter(),
        object(),
        lambda *a: None,
        slice(1),
    ]


N_HOSTILE = len(hostile_values())


hostile = st.integers(0, N_HOSTILE - 1).map(lambda i: hostile_values()[i])


def check_exc(e: BaseException, field: str | None, expect_user: bool) -> None:
    name = type(e).__name__
    assert name != "PanicException", f"Rust panic crossed the FFI: {e!r}"
    assert isinstance(e, Exception), f"non-Exception BaseException escaped: {e!r}"
    assert not isinstance(e, SystemError), f"SystemError: {e!r}"
    if isinstance(e, Boom) and expect_user:
        return
    assert isinstance(e, ALLOWED), f"undocumented exception {name}: {e}"
    if field is not None:
        msg = str(e.args[0]) if e.args else str(e)
        assert field in msg or field in str(e), f"{name} message does not name {field!r}: {e}"


def attempt(
    snap: Callable[[], Any],
    fn: Callable[..., Any],
    *args: Any,
    field: str | None = None,
    user_exc: bool = True,
    known: tuple[type[BaseException], ...] = (),
    **kw: Any,
) -> tuple[bool, Any]:
    """Call ``fn``; on failure check the exception and that ``snap()`` is unchanged.

    Returns ``(ok, result_or_exception)``. ``user_exc``: a :class:`Boom` raised
    by a hostile argument may propagate (it must still change nothing).
    """
    before = snap()
    try:
        r = fn(*args, **kw)
    except BaseException as e:  # noqa: BLE001 - we check its type below
        if not isinstance(e, known):
            check_exc(e, field, user_exc)
        after = snap()
        assert after == before, f"state changed by failing {getattr(fn, '__name__', fn)}: {e!r}"
        return False, e
    return True, r


def must_fail(
    snap: Callable[[], Any],
    fn: Callable[..., Any],
    *args: Any,
    exc: type[BaseException] | tuple[type[BaseException], ...] = ALLOWED,
    field: str | None = None,
    **kw: Any,
) -> BaseException:
    excs = exc if isinstance(exc, tuple) else (exc,)
    user = any(issubclass(x, Boom) for x in excs)
    ok, e = attempt(snap, fn, *args, field=field, user_exc=user, **kw)
    assert not ok, f"{getattr(fn, '__name__', fn)}{args} {kw} succeeded, expected {exc}"
    assert isinstance(e, exc), f"expected {exc}, got {type(e).__name__}: {e}"
    return e


class Item:
    pass


PROBES = [[1, 2, 3, 4], [1, 2, 9], [5, 6, 7, 8, 9, 10], [7]]
