"""Shared pytest configuration.

Hypothesis runs without deadlines (shared CI machines are noisy) and, under
CI, derandomized so a failure reproduces on the next run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# `.ci/run` tests the built wheel: it sets FAIRQ_TEST_INSTALLED to the
# virtualenv it installed the wheel into, and the whole run stops here unless
# `fairq` (and its extension) is imported from that environment's
# site-packages, never from the checkout's python/ tree.
_installed = os.environ.get("FAIRQ_TEST_INSTALLED")
if _installed:
    import sysconfig
    from pathlib import Path

    import fairq
    import fairq._core

    _site = Path(sysconfig.get_paths()["purelib"]).resolve()
    _prefix = Path(_installed).resolve()
    for _mod in (fairq, fairq._core):
        _file = Path(_mod.__file__ or "").resolve()
        if _prefix not in _file.parents or _site not in _file.parents:
            raise RuntimeError(
                f"FAIRQ_TEST_INSTALLED={_installed}: {_mod.__name__} was imported from "
                f"{_file}, not from {_site}"
            )
