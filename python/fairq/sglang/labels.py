"""Carry a request's ``custom_labels`` from SGLang's tokenizer to its scheduler.

In SGLang 0.5.23 a request's custom labels (``GenerateReqInput.custom_labels``:
the ``/generate`` body's ``custom_labels``; for the OpenAI routes, the labels
of the header named by ``--tokenizer-metrics-custom-labels-header`` that
``--tokenizer-metrics-allowed-custom-labels`` allows) stay in the tokenizer
manager, which uses them for its metrics: ``TokenizerManager._create_tokenized_object``
does not copy them into the ``TokenizedGenerateReqInput`` it sends to the
scheduler (a msgspec ``Struct`` without such a field), so the scheduler's
``Req`` never has them and fairq's ``custom_labels`` tenant source would find
nothing. :func:`install` makes them reach the ``Req`` through three extension
points SGLang has for this:

* ``TokenizerManager.tokenized_generate_req_type`` /
  ``batch_tokenized_generate_req_type`` (class attributes naming the message
  types) become :class:`FairqTokenizedGenerateReqInput` (SGLang's type plus
  a ``custom_labels`` field) and its batch, and ``_create_tokenized_object``
  copies the request's labels into it;
* ``io_struct.hook_custom_types`` registers both with the scheduler's IPC
  decoder (msgpack; with ``SGLANG_USE_PICKLE_IPC`` they are pickled by name
  from this module, which every SGLang process that loaded fairq's plugin
  imports);
* ``Scheduler._create_generation_req`` ("extension point for request-local
  state") sets ``req.custom_labels`` from the message.

Nothing else changes: a message without labels decodes as before, and the
scheduler reads the field only when present. Not covered: SGLang's Rust
HTTP server and gRPC paths (they build the scheduler's messages
themselves) and embedding requests.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from sglang.srt.managers import io_struct as _io

__all__ = [
    "FairqBatchTokenizedGenerateReqInput",
    "FairqTokenizedGenerateReqInput",
    "install",
    "uninstall",
]

_ORIGINAL = "__fairq_original__"
_TM_MOD = "sglang.srt.managers.tokenizer_manager"
_SCHED_MOD = "sglang.srt.managers.scheduler"


class FairqTokenizedGenerateReqInput(_io.TokenizedGenerateReqInput, kw_only=True):  # type: ignore[call-arg]
    """SGLang's tokenized request with the request's ``custom_labels``."""

    custom_labels: dict[str, str] | None = None


class FairqBatchTokenizedGenerateReqInput(  # type: ignore[call-arg]
    _io.BatchTokenizedGenerateReqInput, kw_only=True
):
    """SGLang's batch of tokenized requests, of :class:`FairqTokenizedGenerateReqInput`."""

    batch: list[FairqTokenizedGenerateReqInput]


_io.hook_custom_types(FairqTokenizedGenerateReqInput, FairqBatchTokenizedGenerateReqInput)


def copy_labels(tokenized: Any, request: Any) -> Any:
    """``request.custom_labels`` (a mapping of strings) onto ``tokenized``
    when that is a :class:`FairqTokenizedGenerateReqInput`; returns it."""
    labels = getattr(request, "custom_labels", None)
    if isinstance(tokenized, FairqTokenizedGenerateReqInput) and isinstance(labels, dict):
        tokenized.custom_labels = {str(k): str(v) for k, v in labels.items()}
    return tokenized


def _wrap(cls: Any, name: str, make: Any) -> bool:
    cur = getattr(cls, name)
    orig = getattr(cur, _ORIGINAL, cur)
    new = make(orig)
    setattr(new, _ORIGINAL, orig)
    setattr(cls, name, new)
    return True


def install() -> list[str]:
    """Patch what is importable of the tokenizer manager and the scheduler
    (module doc); returns the dotted names patched. Idempotent."""
    done = []
    try:
        tm = importlib.import_module(_TM_MOD)
    except ImportError:  # this process has no tokenizer manager to patch
        tm = None
    if tm is not None:
        cls = tm.TokenizerManager
        if "__fairq_types__" not in vars(cls):
            cls.__fairq_types__ = (
                vars(cls).get("tokenized_generate_req_type"),
                vars(cls).get("batch_tokenized_generate_req_type"),
            )
        cls.tokenized_generate_req_type = FairqTokenizedGenerateReqInput
        cls.batch_tokenized_generate_req_type = FairqBatchTokenizedGenerateReqInput

        def make_create(orig: Any) -> Any:
            def _create_tokenized_object(self: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
                return copy_labels(orig(self, obj, *args, **kwargs), obj)

            return _create_tokenized_object

        _wrap(cls, "_create_tokenized_object", make_create)
        done += [
            f"{_TM_MOD}.TokenizerManager.tokenized_generate_req_type",
            f"{_TM_MOD}.TokenizerManager.batch_tokenized_generate_req_type",
            f"{_TM_MOD}.TokenizerManager._create_tokenized_object",
        ]
    try:
        sm = importlib.import_module(_SCHED_MOD)
    except ImportError:
        sm = None
    if sm is not None:

        def make_req(orig: Any) -> Any:
            def _create_generation_req(self: Any, recv_req: Any, *args: Any, **kwargs: Any) -> Any:
                req = orig(self, recv_req, *args, **kwargs)
                labels = getattr(recv_req, "custom_labels", None)
                if labels:
                    req.custom_labels = labels
                return req

            return _create_generation_req

        _wrap(sm.Scheduler, "_create_generation_req", make_req)
        done.append(f"{_SCHED_MOD}.Scheduler._create_generation_req")
    return done


def uninstall() -> list[str]:
    """Undo :func:`install` (the two message types stay registered with the
    IPC decoder: decoding them is harmless)."""
    done = []
    for mod, cls_name, name in (
        (_TM_MOD, "TokenizerManager", "_create_tokenized_object"),
        (_SCHED_MOD, "Scheduler", "_create_generation_req"),
    ):
        m = sys.modules.get(mod)
        if m is None:
            continue
        cls = getattr(m, cls_name)
        orig = getattr(getattr(cls, name), _ORIGINAL, None)
        if orig is not None:
            setattr(cls, name, orig)
            done.append(f"{mod}.{cls_name}.{name}")
        saved = vars(cls).get("__fairq_types__")
        if saved is not None:
            for attr, value in zip(
                ("tokenized_generate_req_type", "batch_tokenized_generate_req_type"),
                saved,
                strict=True,
            ):
                if value is None:
                    delattr(cls, attr)
                else:
                    setattr(cls, attr, value)
                done.append(f"{mod}.{cls_name}.{attr}")
            delattr(cls, "__fairq_types__")
    return done
