"""The engine benchmarks, together: one workload format, one command.

``fairq engine-bench`` (:mod:`fairq.enginebench.cli`) replays one workload
(:mod:`fairq.enginebench.workload`: the built-in ``flood`` workload, a
simulator workload, or a JSONL trace, the format ``fairq simulate --trace``
reads) on a real engine and reports the same figures for each:

- :mod:`fairq.enginebench.transformers`: transformers' continuous batching
  in-process (``--engine transformers``);
- :mod:`fairq.enginebench.vllm`: vLLM's real scheduler in-process with
  simulated step times (``--engine vllm``);
- :mod:`fairq.enginebench.reasoning`: a reasoning workload (think, then
  output) on vLLM's real scheduler, the dual-phase policy against stock vLLM
  (``--engine vllm --workload reasoning``);
- :mod:`fairq.enginebench.vllm_server`: a real vLLM OpenAI server under HTTP
  traffic (``--engine vllm-server``);
- :mod:`fairq.enginebench.ray`: ``fairq ray-bench``, replicas on Ray Serve
  behind fairq's router;
- :mod:`fairq.enginebench.sglang`: ``python -m fairq.enginebench.sglang``,
  fairq's policies on SGLang's real scheduling objects (time per decision
  against SGLang's own ``calc_priority``; outcomes with ``--outcomes``).
"""
