"""Engines' real scheduling objects driven step by step, without a model.

- :mod:`fairq.enginebench.harness.vllm`: vLLM's ``Scheduler`` /
  ``AsyncScheduler`` over a local model config, fed model-runner outputs the
  caller builds (needs vLLM and torch; importing it imports them);
- :mod:`fairq.enginebench.harness.sglang`: SGLang's ``RadixCache``,
  ``SchedulePolicy`` and ``PrefillAdder`` running its prefill step (needs
  SGLang).

Used by the tests and by ``fairq engine-bench``; nothing here is imported by
the integrations (:mod:`fairq.vllm`, :mod:`fairq.sglang`).
"""
