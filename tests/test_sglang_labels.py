"""A request's ``custom_labels`` reach SGLang's scheduler (``fairq.sglang.labels``).

SGLang 0.5.23's tokenizer manager keeps them (its ``TokenizedGenerateReqInput``
has no such field); fairq's install carries them in a subclass of that
message, through SGLang's real IPC codec, onto the ``Req`` that
``Scheduler._create_generation_req`` builds, where the tenant resolver
reads them. Run with the SGLang venv's python.
"""

from __future__ import annotations

from array import array

import pytest

try:
    import sglang.srt.managers.io_struct as io
except ImportError as e:  # pragma: no cover - depends on the venv
    pytest.skip(f"SGLang 0.5.23 is not importable here ({e})", allow_module_level=True)

from fairq.enginebench.harness.sglang import publish_server_args


def _tokenized(cls: type, rid: str) -> object:
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=4)
    params.normalize(None)
    return cls(
        input_text="hi",
        input_ids=array("q", [1, 2, 3]),
        input_embeds=None,
        mm_inputs=None,
        token_type_ids=None,
        sampling_params=params,
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=False,
        rid=rid,
    )


def test_labels_cross_sglangs_ipc_codec_onto_the_req() -> None:
    """The ``/generate`` body's ``custom_labels`` (a real ``GenerateReqInput``)
    are copied into fairq's message type, survive SGLang's msgpack IPC codec
    (single and batch messages), and SGLang's ``Scheduler._create_generation_req``
    (patched by install) puts them on the ``Req``: the tenant resolver's
    ``custom_labels`` source finds the tenant. Uninstall restores it."""
    sm = pytest.importorskip("sglang.srt.managers.scheduler", reason="SGLang's Scheduler module")
    import fairq.sglang
    from fairq.sglang.tenants import TenantResolver

    publish_server_args()
    orig = sm.Scheduler._create_generation_req
    patched = fairq.sglang.install("fairq-vtc")
    try:
        from fairq.sglang import labels

        assert "sglang.srt.managers.scheduler.Scheduler._create_generation_req" in patched
        body = io.GenerateReqInput(text="hi", custom_labels={"tenant": "alice", "x": "1"})
        msg = labels.copy_labels(_tokenized(labels.FairqTokenizedGenerateReqInput, "r:1"), body)
        plain = labels.copy_labels(
            _tokenized(labels.FairqTokenizedGenerateReqInput, "r:2"), io.GenerateReqInput(text="hi")
        )
        single = io.msgpack_decode(io.msgpack_encode(msg))
        batch = io.msgpack_decode(
            io.msgpack_encode(labels.FairqBatchTokenizedGenerateReqInput(batch=[msg, plain]))
        )
        assert isinstance(single, io.TokenizedGenerateReqInput)  # SGLang's dispatch
        assert single.custom_labels == {"tenant": "alice", "x": "1"}
        assert [m.custom_labels for m in batch.batch] == [{"tenant": "alice", "x": "1"}, None]
        s = object.__new__(sm.Scheduler)
        resolve = TenantResolver()
        for recv, want in ((single, "alice"), (batch.batch[0], "alice"), (batch.batch[1], "r")):
            req = s._create_generation_req(
                recv, recv.rid, recv.input_text, recv.input_ids, recv.sampling_params
            )
            assert resolve(req) == want
        # SGLang's own message type (no field) is unchanged and still works
        own = _tokenized(io.TokenizedGenerateReqInput, "bob:3")
        req = s._create_generation_req(
            own, own.rid, own.input_text, own.input_ids, own.sampling_params
        )
        assert not hasattr(req, "custom_labels") and resolve(req) == "bob"
    finally:
        fairq.sglang.uninstall()
    assert sm.Scheduler._create_generation_req is orig


def test_tokenizer_manager_sends_fairqs_message_type() -> None:
    tm = pytest.importorskip(
        "sglang.srt.managers.tokenizer_manager", reason="SGLang's tokenizer manager (uvloop)"
    )
    import fairq.sglang
    from fairq.sglang import labels

    cls = tm.TokenizerManager
    before = (cls.tokenized_generate_req_type, cls._create_tokenized_object)
    fairq.sglang.install("fairq-vtc")
    try:
        assert cls.tokenized_generate_req_type is labels.FairqTokenizedGenerateReqInput
        assert cls.batch_tokenized_generate_req_type is labels.FairqBatchTokenizedGenerateReqInput
    finally:
        fairq.sglang.uninstall()
    assert (cls.tokenized_generate_req_type, cls._create_tokenized_object) == before
