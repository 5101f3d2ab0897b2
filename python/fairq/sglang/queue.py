"""SGLang's waiting list with every change of membership journaled.

fairq has to know, before each scheduling decision, which requests entered
SGLang's waiting list (arrivals, retractions, preempted requests put back)
and which left it (admitted into a batch, aborted while waiting). Reading
the whole list each step costs O(waiting) Python; SGLang 0.5.23 changes the
list in many places (``Scheduler._add_request_to_queue`` appends arrivals
and retracted requests; ``abort_request`` and ``_abort_on_queued_limit``
``pop``; ``_get_new_batch_prefill_raw`` replaces the list by a filtered
copy, as do the disaggregation and weight-update paths; the PP and
disaggregation mixins ``extend`` and ``insert``), so hooking each of those
methods would miss the next one a release adds. The journal is kept at the
one place all of them go through instead: the list itself.

* :class:`WaitingList` is a ``list`` whose mutating methods (``append``,
  ``extend``, ``+=``, ``insert``, ``pop``, ``remove``, ``clear``, item and
  slice assignment and deletion) record ``(+1, req)`` / ``(-1, req)`` in its
  :class:`Journal`. Reading, iterating, slicing, ``len``, ``sort`` are
  ``list``'s own (C speed, nothing recorded).
* :class:`TrackedAttribute` (installed on SGLang's ``Scheduler`` class as
  ``waiting_queue``) sees every assignment ``scheduler.waiting_queue = new``:
  the scheduler's list takes the new contents as a :class:`WaitingList`
  sharing the journal, and the difference from the old contents is
  recorded. Soundly and cheaply: the parts past a window are compared
  element by element in C (``==`` of two lists of ``Req``, which have no
  ``__eq__``, compares pointers) and only the window's members are diffed;
  the window is the head where fairq put its admitted requests (which is
  where SGLang's adder removes from), and the whole list when that
  comparison fails (:meth:`WaitingList.replaced_by`). Reads are not
  intercepted (no ``__get__``: the instance's value is returned as usual).
  The assigned list itself is not kept (its contents are): code that kept
  a reference to it and changed it later would not change the scheduler's
  list. SGLang 0.5.23 assigns only lists it has just built and drops.

A journal that grows past ``2 * len(list) + 4096`` events without being read
(the scheduler made no decision for that long) is dropped and marked lost;
the reader then reads the whole list once. So is a journal nobody reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import filterfalse
from typing import TYPE_CHECKING, Any, SupportsIndex

__all__ = ["Journal", "TrackedAttribute", "WaitingList"]

_SLACK = 4096


class Journal:
    """Membership changes of one waiting list (across its replacements):
    ``events`` in order, or None when they were lost (read the whole list)."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[tuple[int, Any]] | None = None

    def take(self) -> list[tuple[int, Any]] | None:
        """The events since the last take (None: lost), and start afresh."""
        ev, self.events = self.events, []
        return ev


class WaitingList(list[Any]):
    """A ``list`` of SGLang ``Req`` that journals membership changes (module doc)."""

    __slots__ = ("journal", "head")

    def __init__(self, items: Iterable[Any] = (), journal: Journal | None = None) -> None:
        super().__init__(items)
        #: where changes go; None: not the scheduler's list any more
        self.journal: Journal | None = journal if journal is not None else Journal()
        #: how many requests at the head fairq placed there (the window of
        #: :meth:`replaced_by`'s fast comparison)
        self.head = 0

    # -- recording -----------------------------------------------------------
    def _log(self, sign: int, items: Iterable[Any]) -> None:
        j = self.journal
        if j is None or j.events is None:
            return
        ev = j.events
        ev.extend((sign, x) for x in items)
        if len(ev) > 2 * len(self) + _SLACK:
            j.events = None

    def _log1(self, sign: int, x: Any) -> None:
        j = self.journal
        if j is None or j.events is None:
            return
        ev = j.events
        ev.append((sign, x))
        if len(ev) > 2 * len(self) + _SLACK:
            j.events = None

    # -- list's mutating methods -----------------------------------------------
    def append(self, x: Any) -> None:
        list.append(self, x)
        self._log1(1, x)

    def extend(self, items: Iterable[Any]) -> None:
        items = list(items)
        list.extend(self, items)
        self._log(1, items)

    def __iadd__(self, items: Iterable[Any]) -> WaitingList:  # type: ignore[misc]
        self.extend(items)
        return self

    def __imul__(self, n: SupportsIndex) -> WaitingList:
        list.__imul__(self, n)
        if self.journal is not None:
            self.journal.events = None
        return self

    def insert(self, i: SupportsIndex, x: Any) -> None:
        list.insert(self, i, x)
        self._log1(1, x)

    def pop(self, i: SupportsIndex = -1) -> Any:
        x = list.pop(self, i)
        self._log1(-1, x)
        return x

    def remove(self, x: Any) -> None:
        i = self.index(x)
        self._log1(-1, list.pop(self, i))

    def clear(self) -> None:
        old = list(self)
        list.clear(self)
        self._log(-1, old)

    def __delitem__(self, i: Any) -> None:
        old = self[i]
        list.__delitem__(self, i)
        if isinstance(i, slice):
            self._log(-1, old)
        else:
            self._log1(-1, old)

    def __setitem__(self, i: Any, value: Any) -> None:
        if isinstance(i, slice):
            old = self[i]
            value = list(value)
            list.__setitem__(self, i, value)
            self._log(-1, old)
            self._log(1, value)
        else:
            old = self[i]
            list.__setitem__(self, i, value)
            self._log1(-1, old)
            self._log1(1, value)

    def reorder(self, items: list[Any]) -> None:
        """Replace the contents by ``items``, the same requests in another
        order (fairq's own reordering: nothing is journaled)."""
        list.__setitem__(self, slice(None), items)

    # -- replacement -------------------------------------------------------------
    def replaced_by(self, value: Iterable[Any]) -> WaitingList:
        """The list that replaces this one as the scheduler's, the
        difference journaled.

        Where ``value`` equals this list outside the head window (the common
        case: SGLang's admission filtered out requests fairq put at the
        head), this list itself, its window replaced by ``value``'s: the
        comparison is of pointers (two lists trimmed in place by a memmove
        and restored; no request object is touched outside the window), and
        only the window's members are diffed. Otherwise a new
        :class:`WaitingList` copy of ``value`` sharing the journal, diffed
        whole (set operations in C), and this one stops journaling."""
        j = self.journal
        if not isinstance(value, list):
            value = list(value)
        if j is None or j.events is None:
            self.journal = None
            return WaitingList(value, j)
        n_old, n_new = len(self), len(value)
        w = min(self.head, n_old)
        k = w - (n_old - n_new)  # the new list's window
        if 0 <= k <= n_new:
            old_head = list.__getitem__(self, slice(0, w))
            new_head = list.__getitem__(value, slice(0, k))
            list.__delitem__(self, slice(0, w))
            list.__delitem__(value, slice(0, k))
            try:
                same = list.__eq__(self, value)  # identity per item: Req has no __eq__
            finally:
                list.__setitem__(value, slice(0, 0), new_head)
            list.__setitem__(self, slice(0, 0), new_head if same is True else old_head)
            if same is True:
                self._diff(j, old_head, new_head)
                self.head = k
                return self
        new = WaitingList(value, j)
        self.journal = None
        self._diff(j, list(self), value)
        if j.events is not None and len(j.events) > 2 * n_new + _SLACK:
            j.events = None
        return new

    @staticmethod
    def _diff(j: Journal, old: list[Any], new: list[Any]) -> None:
        if old == new:
            return
        olds, news = set(old), set(new)
        WaitingList._into(j, -1, filterfalse(news.__contains__, old))
        WaitingList._into(j, 1, filterfalse(olds.__contains__, new))

    @staticmethod
    def _into(j: Journal, sign: int, items: Iterable[Any]) -> None:
        if j.events is not None:
            j.events.extend((sign, x) for x in items)


class TrackedAttribute:
    """A class attribute (data descriptor without ``__get__``) that turns an
    assignment of a new list to an instance's attribute ``name``, while that
    attribute holds a :class:`WaitingList`, into
    :meth:`WaitingList.replaced_by`. Any other assignment is stored as is."""

    def __init__(self, name: str) -> None:
        self.name = name

    if TYPE_CHECKING:  # for type checkers only: at run time reads are not intercepted

        def __get__(self, obj: Any, owner: Any = None) -> list[Any]: ...

    def __set__(self, obj: Any, value: Any) -> None:
        d = obj.__dict__
        cur = d.get(self.name)
        if isinstance(cur, WaitingList) and value is not cur:
            value = cur.replaced_by(value)
        d[self.name] = value

    def __delete__(self, obj: Any) -> None:
        try:
            del obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    @staticmethod
    def track(obj: Any, name: str) -> WaitingList:
        """Make ``obj.<name>`` (a list) a :class:`WaitingList` whose journal
        starts lost (its reader reads the whole list first)."""
        cur = obj.__dict__.get(name)
        if isinstance(cur, WaitingList) and cur.journal is not None:
            return cur
        wl = WaitingList(cur if cur is not None else ())
        obj.__dict__[name] = wl
        return wl
