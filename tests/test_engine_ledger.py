"""transformers' fairq schedulers on the shared ledger, with the real engine
(CPU, a tiny random-weight model): the state file across a restart, the
save when the engine goes idle, and the per-tenant metrics.

Skipped without the ``engine`` extra (torch + transformers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_NEEDS = "engine tests need torch and transformers (pip install '.[engine]')"
for _module in ("torch", "transformers"):
    pytest.importorskip(_module, reason=_NEEDS)

from fairq import metrics  # noqa: E402
from fairq.ledger import TenantTally  # noqa: E402
from fairq.transformers import model as tf_model  # noqa: E402
from fairq.transformers import scheduler as fs  # noqa: E402
from fairq.transformers import stats as tf_stats  # noqa: E402

pytestmark = pytest.mark.engine

QUANTUM = 32.0
NEW_TOKENS = 3


@pytest.fixture(scope="module")
def model() -> Any:
    return tf_model.build_model("tiny", seed=0)


@pytest.fixture(autouse=True)
def default_registration() -> Iterator[None]:
    yield
    fs.register()  # later tests get the default classes


def _register(state_file: Path | None) -> str:
    opts: dict[str, Any] = {"quantum": QUANTUM}
    if state_file is not None:
        opts.update(state_file=str(state_file), state_interval_s=3600.0)
    fs.register(["dlpm"], options={"dlpm": opts})
    return fs.scheduler_type("dlpm")


def _manager(model: Any, stype: str) -> Any:
    from transformers import ContinuousBatchingConfig, GenerationConfig

    cfg = ContinuousBatchingConfig(
        **{tf_model.page_size_field(): 16},
        num_blocks=64,
        max_batch_tokens=64,
        max_requests_per_batch=1,
        scheduler_type=stype,
    )
    gen = GenerationConfig(
        do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=NEW_TOKENS
    )
    return model.init_continuous_batching(generation_config=gen, continuous_batching_config=cfg)


def _serve(
    model: Any, stype: str, requests: list[tuple[str, list[int]]], idle_check: Any = None
) -> Any:
    """Queue ``requests`` (all before the engine starts), run them to the
    end, call ``idle_check()`` while the engine still runs (idle), stop;
    returns the scheduler that ran."""
    manager = _manager(model, stype)
    for rid, prompt in requests:
        manager.add_request(prompt, request_id=rid, max_new_tokens=NEW_TOKENS)
    manager.start()
    try:
        done: set[str] = set()
        while len(done) < len(requests):
            out = manager.get_result(timeout=60)
            assert out is not None, f"engine stopped; finished {sorted(done)}"
            assert len(out.generated_tokens) == NEW_TOKENS
            done.add(out.request_id)
        sched = fs.running_scheduler(manager)
        if idle_check is not None:
            idle_check()
    finally:
        manager.stop(block=True)
    return sched


def _saved_tier(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert doc["format"] == fs.STATE_FORMAT and doc["policy"] == "dlpm"
    empty: dict[str, Any] = {"clients": [], "running": []}  # saved before any request
    tier: dict[str, Any] = doc["state"]["tiers"].get("0", empty)
    return tier


def _saved_clients(path: Path) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _saved_tier(path)["clients"]}


#: heavy: four 48-token prompts (no shared prefix), light: one of 4 tokens
BURST = [(f"heavy/{i}", [11 + i] * 48) for i in range(4)] + [("light/1", [5] * 4)]
HEAVY_1 = 4 * (48 + 2 * NEW_TOKENS)
LIGHT_1 = 4 + 2 * NEW_TOKENS
#: after the restart heavy sends first, light right after (one request a step)
AFTER = [("heavy/9", [90] * 40), ("light/2", [6] * 8)]


def _placed_first(sched: Any) -> str:
    recs = [r for r in sched.stats.requests.values() if r.placed_step is not None]
    return min(recs, key=lambda r: (r.placed_step, r.request_id)).client


def test_state_file_keeps_the_heavy_tenant_behind_after_a_restart(
    model: Any, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "fairq.json"
    path.parent.mkdir()
    stype = _register(path)

    def saved_on_idle() -> None:
        # interval 1 h: only the engine going idle can have saved the burst
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            clients = _saved_clients(path)
            if clients.get("heavy", {}).get("service") == HEAVY_1:
                break
            time.sleep(0.05)
        assert clients["heavy"]["service"] == HEAVY_1
        assert clients["light"]["service"] == LIGHT_1
        assert (clients["heavy"]["admitted"], clients["light"]["admitted"]) == (4, 1)
        assert _saved_tier(path)["running"] == []  # every finish in the file

    first = _serve(model, stype, BURST, idle_check=saved_on_idle)
    assert first.persist is not None and first.persist.saves >= 2  # fresh start, idle
    saved = _saved_clients(path)
    assert saved["light"]["deficit"] > 0 >= saved["heavy"]["deficit"]

    # a new engine (a restarted process) reads the file: light goes first
    restored = _serve(model, stype, AFTER)
    assert _placed_first(restored) == "light"
    assert restored.service("heavy") == pytest.approx(HEAVY_1 + 40 + 2 * NEW_TOKENS)
    assert restored.service("light") == pytest.approx(LIGHT_1 + 8 + 2 * NEW_TOKENS)
    assert len(restored.ledger) == 0 and restored.fq.num_running == 0

    # the same engine with no state file: arrival order, heavy first
    fresh = _serve(model, _register(None), AFTER)
    assert fresh.persist is None
    assert _placed_first(fresh) == "heavy"
    assert fresh.service("heavy") == pytest.approx(40 + 2 * NEW_TOKENS)


def test_a_reset_saves_and_loads_back(model: Any, tmp_path: Path) -> None:
    """The engine resets its scheduler when the same manager starts again:
    the state is saved, then loaded into the fresh ledger."""
    first = _serve(model, _register(tmp_path / "fairq.json"), BURST)
    before = {t: (first.fq.deficit(t), first.service(t)) for t in ("heavy", "light")}
    old = first.ledger
    first.reset()
    assert first.ledger is not old and len(first.ledger) == 0
    assert {t: (first.fq.deficit(t), first.service(t)) for t in before} == before


def test_a_bad_state_file_is_moved_aside_and_the_engine_starts(model: Any, tmp_path: Path) -> None:
    path = tmp_path / "fairq.json"
    path.write_text("{not json")
    sched = _serve(model, _register(path), AFTER)
    assert list(tmp_path.glob("fairq.json.bad-*"))
    assert _saved_clients(path)["heavy"]["service"] == 40 + 2 * NEW_TOKENS
    assert sched.service("light") == pytest.approx(8 + 2 * NEW_TOKENS)


def test_per_tenant_metrics(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    monkeypatch.setenv(metrics.ENV_VAR, "1")
    name = "transformers-dlpm"
    try:
        sched = _serve(model, _register(None), BURST)
        sched.flush()
        value = prometheus_client.REGISTRY.get_sample_value
        labels = {"name": name, "tenant": "heavy"}
        assert value("fairq_scheduler_service_tokens_total", labels) == HEAVY_1
        assert value("fairq_scheduler_admissions_total", labels) == 4
        assert value("fairq_scheduler_running_requests", labels) == 0
        assert value("fairq_transformers_requests_total", labels) == 4
        assert value("fairq_transformers_prompt_tokens_total", labels) == 4 * 48
        assert value("fairq_transformers_requests_total", {**labels, "tenant": "light"}) == 1
        # another policy's scheduler publishes the same families beside it
        tf_stats.publish_tally(TenantTally(), "transformers-other", threading.RLock())
        assert value("fairq_transformers_requests_total", labels) == 4
    finally:
        for published in (metrics._published, tf_stats._tallies):
            for key in (name, "transformers-other"):
                collector = published.pop(key, None)
                if collector is not None:
                    prometheus_client.REGISTRY.unregister(collector)
