"""Integrations of fairq's schedulers into real serving engines.

Each integration is an optional subpackage that imports its engine only when
used: ``fairq.integrations.transformers`` plugs fairq's local schedulers into
Hugging Face transformers' continuous batching (extra ``fairq[engine]``).
"""
