"""One engine-neutral fairness ledger that every engine integration uses.

* :class:`Ledger` (:mod:`fairq.ledger.book`): the waiting / admitted /
  running book keyed by request id, tenants, priority tiers, the charging
  rules (each prompt position once, output per token, pending output),
  admission (one loop shape, DLPM's within credit), the adaptive batch,
  requeue with refund or keep, finish / abort / forget, and the saved
  state's source (``persisted_options`` / ``persisted`` / ``restore``).
* :class:`Persistence` (:mod:`fairq.ledger.persist`): the state file
  (atomic snapshots, load at start, the envelope vLLM's files have).
* :class:`StepHook`, :class:`Hooks`, :class:`PersistHook`
  (:mod:`fairq.ledger.hooks`): the step hooks as a declared protocol that an
  engine scheduler holds as a list; :class:`LedgerView`, what a translator
  exposes of its ledger.
* :class:`Flusher` (:mod:`fairq.ledger.flush`): metrics and snapshots at a
  bounded interval whether or not the engine steps, under the ledger's lock.
* :class:`AdmissionControl`, :class:`Limits` (:mod:`fairq.ledger.caps`):
  per-tenant and global caps and token rates, decided at a front door in
  one call, refusing the tenant furthest over its share (429s).
* :class:`TenantTally` (:mod:`fairq.ledger.tally`): per-tenant requests,
  prompt tokens and prefix hits.

An engine's integration translates its events into ledger calls (vLLM:
:mod:`fairq.vllm.fair`; SGLang: :mod:`fairq.sglang.fair`). The life of one
request, as an engine reports it::

    ledger.add(rid, req, prompt_tokens, tier=priority, namespace=ns)
    for req in ledger.admit():        # the policy's next few, in order
        ...the engine takes some:  ledger.take(rid)
    ledger.release(tokens_of)         # the rest back, refunded
    ledger.charge_prompt(rid, start, end, prompt_len)   # each chunk run
    ledger.settle()                   # estimates -> what was computed
    ledger.end_step(taken)            # next batch size
    ledger.charge_output(rid, n)      # output tokens
    ledger.requeue(rid, all_tokens, refund=False)       # preempted
    ledger.finish(rid)                # finished or aborted: forgotten
"""

from __future__ import annotations

from fairq.ledger.book import MAX_BATCH, MIN_BATCH, UNBOUNDED, Ledger
from fairq.ledger.caps import AdmissionControl, Limits, Refusal
from fairq.ledger.flush import Flusher
from fairq.ledger.hooks import Hooks, LedgerView, PersistHook, StepHook, StepHookProtocol
from fairq.ledger.persist import Persistence, StateFile, StateSource
from fairq.ledger.tally import TenantTally

__all__ = [
    "AdmissionControl",
    "Limits",
    "Refusal",
    "Flusher",
    "Hooks",
    "Ledger",
    "LedgerView",
    "MAX_BATCH",
    "MIN_BATCH",
    "PersistHook",
    "Persistence",
    "StateFile",
    "StateSource",
    "StepHook",
    "StepHookProtocol",
    "TenantTally",
    "UNBOUNDED",
]
