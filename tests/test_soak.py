"""The soak harness (``fairq soak``, issue 15 item 3), in a short version:
every structure conserves requests over random operations, and the checker
itself catches a request that leaves twice or never."""

from __future__ import annotations

import json
import random

import pytest

from fairq import soak


@pytest.mark.parametrize("name", soak.STRUCTURES)
def test_every_request_leaves_exactly_once(name: str) -> None:
    rep = soak.soak(name, 20_000, depth=200, clients=7, seed=3, samples=4)
    assert rep["added"] == rep["left"] > 1000
    assert len(rep["rss_mb"]) == len(rep["rss_at_ops"]) >= 4


def test_distinct_clients_run() -> None:
    rep = soak.soak("vtc", 5_000, depth=50, distinct_clients=True, seed=1)
    assert rep["added"] == rep["left"]


def test_the_checker_catches_a_duplicate_and_a_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    real = soak.make_driver

    def twice(name: str, rng: random.Random) -> soak.Driver:
        d = real(name, rng)
        take = d.take
        return soak.Driver(d.add, lambda: [*take(), *take()][:1] * 2, d.remove)

    monkeypatch.setattr(soak, "make_driver", twice)
    with pytest.raises(soak.ConservationError, match="left twice"):
        soak.soak("drr", 2_000, depth=20)

    def lossy(name: str, rng: random.Random) -> soak.Driver:
        d = real(name, rng)
        take = d.take
        return soak.Driver(d.add, lambda: list(take())[1:], d.remove)  # drops one

    monkeypatch.setattr(soak, "make_driver", lossy)
    with pytest.raises(soak.ConservationError, match="was lost"):
        soak.soak("drr", 2_000, depth=20)


def test_slope() -> None:
    assert soak.slope([0, 1, 2], [5.0, 7.0, 9.0]) == pytest.approx(2.0)
    assert soak.slope([1], [3.0]) == 0.0


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    from fairq.cli import main

    assert main(["soak", "--ops", "3000", "--structure", "wfq", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["results"][0]["structure"] == "wfq" and "| wfq |" in err
    assert main(["soak", "--ops", "0"]) == 2
