"""Small, obviously-correct pure-Python models the tests check fairq against.

One module per policy module of fairq:

- :mod:`reference.radix`: ``fairq.RadixTree`` (a dict of prefixes);
- :mod:`reference.sched`: the local schedulers FCFS, LPM, VTC, DLPM;
- :mod:`reference.dispatch`: the dispatchers (D2LPM, PrefixAffinity);
- :mod:`reference.drr`: DRR across policy classes;
- :mod:`reference.wfq`: WFQ;
- :mod:`reference.vllm`: vLLM's request queues, and :class:`reference.vllm.Req`,
  the one stand-in for a vLLM ``Request`` every test uses.

They favour plain data structures and literal transcriptions of
``ALGORITHMS.md`` over speed; none is used outside ``tests/``.
"""
