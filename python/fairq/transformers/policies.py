"""The engine policy table, for the transformers integration (pure Python).

It lives in :mod:`fairq.engineopts`, shared by every engine integration
(transformers, vLLM, SGLang); this module re-exports it under its old path.
"""

from __future__ import annotations

from fairq.engineopts import POLICIES, build_policy, check_policy, policy_options

__all__ = ["POLICIES", "build_policy", "check_policy", "policy_options"]
