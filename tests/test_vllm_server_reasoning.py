"""A real vLLM server with fairq's dual-phase policy and vLLM's reasoning
parser (issue 24, item 4).

One server (one start, ~45-60 s on 2 cores): fairq's scheduler class with
``dlpm`` and ``dual_phase`` on, ``--reasoning-parser deepseek_r1`` over a
random-weight tiny Llama whose word-level tokenizer has ``<think>`` and
``</think>`` (:func:`fairq.enginebench.server.write_model` with
``think_tokens=True``). fairq reads the end-of-think id from vLLM's parser
(nothing in ``dual_phase`` names it).

A random-weight model writes ``</think>`` only by chance, so each request
restricts sampling to a few words (``allowed_token_ids``) at temperature 1
with its own ``seed``: with ``</think>`` among eleven allowed words a request
usually ends its reasoning within its 24 tokens, at a place the test reads
back from the answer's ``token_ids``; the flooding tenant's requests leave
``</think>`` out and think for all their 48 tokens. What the server says is
then checked against those token ids: the parser's split of each answer, and
fairq's phase transitions and per-phase scheduled tokens on ``/metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from fairq.enginebench.server import VllmServer, think_token_ids, write_model
from fairq.enginebench.traffic import HttpRequest, HttpResult, metric_sum, scrape, send_all

from reference.vllm import require_serving_vllm, vllm_server

pytestmark = pytest.mark.vllm_server

_VERSION = require_serving_vllm()

START, END = think_token_ids("tiny")
#: the words a request may sample: t3 .. t12, and ``</think>`` unless it floods
WORDS = list(range(3, 13))
OUT_TOKENS = 24
FLOOD_TOKENS = 48

#: 4 running requests, 2 of them output-phase per step at most
ARGS = ["--max-num-seqs", "4", "--reasoning-parser", "deepseek_r1"]
OPTIONS = {"dual_phase": {"output_budget": 2, "min_think_reservation": 1}}


def _word(t: int) -> str:
    return {START: "<think>", END: "</think>"}.get(t, f"t{t}")


def _request(
    rid: str,
    tenant: str,
    seed: int,
    n: int,
    *,
    ends: bool = True,
    arrival: float = 0.0,
    stream: bool = False,
) -> HttpRequest:
    """A chat request whose prompt opens the reasoning (``... <think>``)."""
    prompt = [3 + (seed * 37 + 11 * i) % 4000 for i in range(20 + seed % 7)] + [START]
    return HttpRequest(
        rid,
        tenant,
        prompt,
        n,
        arrival=arrival,
        endpoint="chat",
        stream=stream,
        extra={
            "messages": [{"role": "user", "content": " ".join(_word(t) for t in prompt)}],
            "temperature": 1.0,
            "seed": seed,
            "allowed_token_ids": WORDS + ([END] if ends else []),
            "return_token_ids": True,
        },
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VllmServer, str]]:
    model = write_model(tmp_path_factory.mktemp("model"), "tiny", think_tokens=True)
    log = tmp_path_factory.mktemp("log") / "server.log"
    # the context manager stops the server's whole process group, also when
    # a test fails or start-up does not finish within its timeout
    with vllm_server(model, "dlpm", options=OPTIONS, args=ARGS, log=log, startup_timeout=300) as s:
        yield s, model


def _end_index(r: HttpResult) -> int | None:
    assert r.token_ids is not None, r
    return r.token_ids.index(END) if END in r.token_ids else None


def _settle(url: str, model: str) -> HttpResult:
    """fairq's counters reach ``/metrics`` at most once a second while the
    engine steps: wait past that and make it step again, with a request that
    stays in the think phase (so it adds nothing to output-phase counts)."""
    time.sleep(1.2)
    (r,) = send_all(url, model, [_request("settle", "settle", 999, 2, ends=False)])
    assert r.ok, (r.status, r.error)
    return r


def test_reasoning_traffic_completes_with_phases_split_and_counted(
    server: tuple[VllmServer, str],
) -> None:
    s, model = server
    # one tenant floods long reasoning at t=0; two others send short
    # reasoning with answers, spread over the flood
    reqs = [_request(f"f{i}", "flood", 100 + i, FLOOD_TOKENS, ends=False) for i in range(10)]
    # (bob streams: vLLM's streaming reasoning parser splits his answers)
    for t in ("alice", "bob"):
        reqs += [
            _request(
                f"{t}{i}", t, 200 + 10 * len(t) + i, OUT_TOKENS, arrival=0.1 * i, stream=t == "bob"
            )
            for i in range(8)
        ]
    results = send_all(s.url, model, reqs)
    _settle(s.url, model)
    m = scrape(s.url)

    # everything answered exactly once, with the tokens asked for
    assert len({r.request.request_id for r in results}) == len(reqs)
    for r in results:
        assert r.ok, (r.request.request_id, r.status, r.error)
        assert r.finish_reason == "length", r
        assert r.token_ids is not None and len(r.token_ids) == r.request.max_tokens, r
    assert metric_sum(m, "vllm:request_success_total") == len(reqs) + 1  # + settle
    got = {dict(k)["tenant"]: v for k, v in m["fairq_vllm_requests_total"].items()}
    assert got == {"flood": 10, "alice": 8, "bob": 8, "settle": 1}

    # vLLM's parser split each answer at its first </think> (streamed too)
    ends = {r.request.request_id: _end_index(r) for r in results}
    for r in results:
        ids = r.token_ids or []
        e = ends[r.request.request_id]
        if e is None:
            assert (r.reasoning or "").split() == [_word(t) for t in ids], r
            assert not r.content, r  # None (streamed: at most empty deltas)
        else:
            assert (r.reasoning or "").split() == [_word(t) for t in ids[:e]], r
            assert (r.content or "").split() == [_word(t) for t in ids[e + 1 :]], r
    assert all(ends[f"f{i}"] is None for i in range(10))
    # both phases observed: most answering requests end their reasoning early
    switched = [rid for rid, e in ends.items() if e is not None and e < OUT_TOKENS - 1]
    assert len(switched) >= 8, ends

    # fairq's view on /metrics agrees with the tokens (name: vllm-dualphase)
    assert metric_sum(m, "fairq_vllm_dualphase_preemptions_total") == 0  # ample KV here
    # a request moves to output when a step samples </think>, unless that
    # was its last token (it finished)
    assert metric_sum(m, "fairq_dualphase_phase_transitions_total") == len(switched)
    # each output-phase step schedules the one token sampled before it: a
    # request ending its reasoning at token e (0-based) has N - e - 1 of
    # them; with async scheduling the step already scheduled when </think>
    # is seen is still counted as think (at most one per request)
    after_end = sum(OUT_TOKENS - e - 1 for e in ends.values() if e is not None)
    out_tok = metric_sum(m, "fairq_vllm_dualphase_scheduled_tokens_total", phase="output")
    print(
        f"switched {len(switched)}/{len(ends)}; output tokens {out_tok} (from the answers: "
        f"{after_end}); think tokens "
        f"{metric_sum(m, 'fairq_vllm_dualphase_scheduled_tokens_total', phase='think')}; "
        f"reserved ahead {metric_sum(m, 'fairq_vllm_dualphase_reserved_ahead_total')}; "
        f"forced {metric_sum(m, 'fairq_dualphase_budget_force_triggered_total')}"
    )
    assert after_end - len(switched) <= out_tok <= after_end, (out_tok, after_end)
    # think: every prompt and every token up to </think> (or to the end)
    think_min = sum(
        len(r.request.prompt) + (r.request.max_tokens - 1 if e is None else e)
        for r, e in ((r, ends[r.request.request_id]) for r in results)
    )
    think_tok = metric_sum(m, "fairq_vllm_dualphase_scheduled_tokens_total", phase="think")
    assert think_min <= think_tok <= think_min + len(switched) + 40, (think_tok, think_min)
    # nothing left in either phase once the traffic is done
    assert metric_sum(m, "fairq_dualphase_queue_depth", queue="output") == 0
    assert metric_sum(m, "fairq_vllm_dualphase_waiting") == 0
    # DLPM under the phases: each request admitted once, none left waiting
    assert metric_sum(m, "fairq_scheduler_admissions_total") == len(reqs) + 1
    assert metric_sum(m, "fairq_scheduler_waiting_requests") == 0
    log = s.log_text()
    assert "Traceback" not in log
    # nothing in dual_phase names the end-of-think id: fairq read it from
    # vLLM's parser (its start-up line says so)
    assert "end_think_token_id" not in str(OPTIONS)
    assert f"end-of-think token ids [{END}] from reasoning parser 'deepseek_r1'" in log
