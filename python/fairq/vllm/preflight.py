"""fairq's vLLM settings checked before vLLM loads a model (a vLLM plugin).

Registered as the entry point ``fairq`` of group ``vllm.general_plugins``
(``pyproject.toml``). vLLM runs those early in each of its processes; in
the API server (``python -m vllm.entrypoints.openai.api_server``, ``vllm
serve``; vLLM 0.32 and 0.33) the first call is
``AsyncEngineArgs.add_cli_args``, while it builds its argument parser,
before it reads the arguments, loads the model or starts the engine core.
:func:`plugin` then checks ``FAIRQ_VLLM_POLICY``, ``FAIRQ_VLLM_CONFIG`` and
``FAIRQ_VLLM_OPTIONS`` exactly as fairq's scheduler class will read them
(:func:`check_environment`). A bad one ends the server there, in about the
time vLLM takes to import, with one line on stderr naming the variables and
the field, e.g. ``fairq: FAIRQ_VLLM_POLICY=dlpm, FAIRQ_VLLM_OPTIONS: unknown
option 'quantm' for policy 'dlpm' (options: ...)``, exit status 2 (instead
of the same message after the model loaded, inside vLLM's tracebacks).
Where vLLM is not run from its command line (``vllm.LLM`` in a program,
Ray Serve's replicas) the same message is a ``ValueError``/``TypeError``.
vLLM's helper subprocesses that build no scheduler (the model registry's
``python -m vllm.model_executor.models.registry``) are left alone.

Without any of the three variables it does nothing (fairq's scheduler class
then runs vLLM's ``--scheduling-policy``). With ``FAIRQ_VLLM_POLICY`` unset,
the options are checked as far as they can be without vLLM's arguments
(their JSON and the saved state's keys). The scheduler class checks
everything again when vLLM builds it (the last line of defence, also for
``VLLM_PLUGINS`` lists that leave ``fairq`` out).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["ENV_VARS", "check_environment", "plugin"]

#: The variables checked (the policy, the options file, the options).
ENV_VARS = ("FAIRQ_VLLM_POLICY", "FAIRQ_VLLM_CONFIG", "FAIRQ_VLLM_OPTIONS")


def check_environment() -> str | None:
    """Check fairq's vLLM variables (:data:`ENV_VARS`) as the scheduler
    class reads them: the policy name, every option of a fair policy
    (:func:`fairq.vllm.scheduler.fair_options`) or the queue a queue policy
    builds (:func:`fairq.vllm.scheduler.queue_options`), ``dual_phase``,
    and the front door's ``limits`` / ``tenant_weights``
    (:func:`fairq.vllm.door.door_options`) whatever the policy.
    Returns the policy checked (``""``: options only, no policy set; None:
    none of the variables set). A bad setting raises ``ValueError`` or
    ``TypeError`` naming the field; nothing is built that lasts."""
    if not any(os.environ.get(v, "").strip() for v in ENV_VARS):
        return None
    from fairq.engineopts import state_options
    from fairq.vllm import create_request_queue
    from fairq.vllm.dualphase import DualPhaseOptions
    from fairq.vllm.scheduler import DOOR_KEYS, fair_options, queue_options, resolve_policy
    from fairq.vllm.tenants import FAIR_POLICIES, load_options

    raw = load_options()  # the file and the JSON: syntax and type
    if not os.environ.get(ENV_VARS[0], "").strip():
        state_options(raw)
        policy_name = ""
    else:
        policy = resolve_policy(None)
        policy_name = str(policy.value)
        if policy_name in FAIR_POLICIES:
            fair_options(policy_name)
        else:
            options, _, _ = queue_options(policy)
            create_request_queue(policy, **options)
    dual = raw.get("dual_phase")
    if dual is not None and dual is not False:
        DualPhaseOptions.from_mapping(dual)
    if any(k in raw for k in DOOR_KEYS):
        # the front door's (a queue policy, or no policy, passes them by)
        from fairq.vllm.door import door_options

        door_options()
    return policy_name


def _main_module() -> str:
    """The name ``python -m`` ran this process's ``__main__`` under ("" for
    a script or an interactive interpreter)."""
    main = sys.modules.get("__main__")
    spec: Any = getattr(main, "__spec__", None)
    return getattr(spec, "name", "") or ""


def _from_vllm_command_line() -> bool:
    """This process is vLLM's command line (``vllm ...``, ``python -m vllm``,
    or a module of ``vllm.entrypoints`` run with ``python -m``)."""
    name = _main_module()
    return (
        name.startswith("vllm.entrypoints.")
        or name == "vllm.__main__"
        or os.path.basename(sys.argv[0] if sys.argv else "") == "vllm"
    )


def _vllm_helper_process() -> bool:
    """This process is one of vLLM's helpers run as ``python -m vllm.<module>``
    that builds no scheduler, e.g. the model registry's inspection of a model
    class (``python -m vllm.model_executor.models.registry``, vLLM 0.32 and
    0.33), which loads the general plugins too. A check failing there would
    only surface as vLLM's "Model architectures [...] failed to be
    inspected", which vLLM remembers for the rest of the calling process."""
    name = _main_module()
    return name.startswith("vllm.") and not _from_vllm_command_line()


def plugin() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: :func:`check_environment`;
    from vLLM's command line a bad setting prints one line and exits with
    status 2, elsewhere it raises. In vLLM's helper subprocesses (the model
    registry's) it checks nothing: the process that builds the scheduler
    reports the setting."""
    if _vllm_helper_process():
        return
    try:
        check_environment()
    except (ValueError, TypeError) as e:
        if not _from_vllm_command_line():
            raise
        msg = str(e)
        if not any(v in msg for v in ENV_VARS):
            where = ", ".join(
                f"{v}={os.environ[v].strip()}" if v == ENV_VARS[0] else v
                for v in ENV_VARS
                if os.environ.get(v, "").strip()
            )
            msg = f"{where}: {msg}"
        print(f"fairq: {msg}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
