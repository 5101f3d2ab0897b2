"""Local (per-worker) schedulers: FCFS, LPM, VTC and DLPM (implemented in Rust).

All four share one interface, so engines and the simulator swap them freely::

    tree = fairq.RadixTree()
    s = fairq.DLPM(tree, quantum=2048)
    s.add("r1", "alice", tokens, item=req)
    for a in s.schedule(token_budget=8192):      # list[fairq.Admission]
        run_prefill(a.item, a.cached_len, a.extend_len)
    tree.insert(tokens)                           # the engine inserts after prefill
    s.charge_output("r1", 1)                      # after each decode step
    s.finish("r1")

Policies (contract: ALGORITHMS.md sections 5 and 6):

* ``FCFS(tree=None)``: arrival order; stops at the first request that does not
  fit the remaining budget.
* ``LPM(tree)``: longest cached prefix first, ties by arrival; requests that
  do not fit are skipped (the walk continues), as in the paper's ``CanAdd``.
* ``VTC(tree=None, w_in=1.0, w_out=2.0)``: the waiting client with the smallest
  virtual counter gets its oldest request admitted; stops at the first that
  does not fit. Admission charges ``w_in * input_len / weight``, each output
  token ``w_out / weight``; a client that becomes backlogged is lifted to the
  smallest counter among the other waiting clients.
* ``DLPM(tree, quantum, w_e=1.0, w_q=2.0)``: LPM order; clients with deficit
  ``q <= 0`` are skipped unless no waiting client has ``q > 0``, in which case
  every known client with ``q <= 0`` gets ``+quantum`` (applied in bulk: as
  many refills as it takes for some waiting client to reach ``q > 0``;
  ``refills`` counts them all); admission charges ``w_e * extend_len /
  weight``, each output token ``w_q / weight``. The walk is repeated until it
  admits and refills nothing, so DLPM is work-conserving for any ``quantum``
  (paper Algorithm 1), with one deliberate exception kept for the fairness
  bound: a waiting client with credit none of whose requests fits blocks the
  refill the others need.

``extend_len = input_len - cached_len`` where ``cached_len`` is the match
against the tree at scheduling time (it may be 0 extend tokens for a fully
cached prompt). The scheduler never inserts into the tree; it notices the
engine's inserts and evictions through the tree's change log.

``recharge_extend(request_id, extend_len)`` corrects a running request's extend
charge once the engine knows its real prefix match (the tree the scheduler read
is only a prediction): it replaces the extend tokens charged at admission and
returns the previous value. ``service(client)`` moves by ``w_e * delta`` (VTC:
``w_in``; FCFS/LPM: 1) and DLPM's deficit by ``-w_e * delta / weight`` (the
weight the client had at admission), so the request ends up charged exactly as
if it had been admitted with ``extend_len``. VTC's counter does not move: it
charges ``w_in * input_len`` whatever was cached. ``charged_extend(request_id)``
reads the current value. Not running -> ``KeyError``; ``extend_len`` < 0 or >
the prompt length -> ``ValueError`` (nothing changes on error).

``service(client)`` is the raw ``w_in/w_e * extend + w_out/w_q * output``
tokens served (weights not divided by the client weight); unknown clients
have service, counter and deficit 0.
"""

from __future__ import annotations

from fairq._core import DLPM, FCFS, LPM, VTC, Admission

Scheduler = FCFS | LPM | VTC | DLPM
"""Any local scheduler (they share one interface)."""

__all__ = ["DLPM", "FCFS", "LPM", "VTC", "Admission", "Scheduler"]
