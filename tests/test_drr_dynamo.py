"""DRRQueue reading NVIDIA Dynamo's router policy schema: classification at
bucket edges, model profiles, per-worker limits, busy thresholds, and every
configuration error naming its field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairq import DRRQueue, PolicyClass, QueueFull

from fuzz.hostile import FUZZ, Boom, attempt, hostile

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dynamo-policy.yaml"

# The same shape as the example (two families, two buckets, an explicit
# class, a model profile), as a dict so tests can break one field at a time.
DOC: dict[str, Any] = {
    "default_policy_family": "chat",
    "uncached_isl_buckets": [
        {"min_tokens": 0, "bucket": "reuse"},
        {"min_tokens": 2048, "bucket": "fresh"},
    ],
    "policy_classes": [
        {"name": "chat-reuse", "policy_family": "chat", "cache_bucket": "reuse", "quantum": 8},
        {"name": "chat-fresh", "policy_family": "chat", "cache_bucket": "fresh", "quantum": 4},
        {"name": "off-reuse", "policy_family": "offline", "cache_bucket": "reuse", "quantum": 2},
        {"name": "off-fresh", "policy_family": "offline", "cache_bucket": "fresh", "quantum": 1},
        {"name": "admin", "quantum": 3},
    ],
    "models": {
        "llama": {
            "default_policy_family": "fast",
            "uncached_isl_buckets": [{"min_tokens": 0, "bucket": "all"}],
            "policy_classes": [
                {"name": "fast", "policy_family": "fast", "cache_bucket": "all", "quantum": 1},
                {"name": "slow", "policy_family": "slow", "cache_bucket": "all", "quantum": 1},
                {"name": "ops", "quantum": 5},
            ],
        }
    },
}


def doc(**changes: Any) -> dict[str, Any]:
    """DOC with ``path=value`` changes; path segments joined by ``__``,
    list indices as digits; value ``...`` deletes the field."""
    d = copy.deepcopy(DOC)
    for path, v in changes.items():
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split("__")]
        cur: Any = d
        for k in keys[:-1]:
            cur = cur[k]
        if v is ...:
            del cur[keys[-1]]
        else:
            cur[keys[-1]] = v
    return d


def snap(q: DRRQueue) -> Any:
    return (len(q), q.cursor, q.num_workers, q.stats())


# --- the example file -------------------------------------------------------


def test_example_file_classifies_at_bucket_edges() -> None:
    q = DRRQueue.from_config(EXAMPLE)
    assert q.schema == "dynamo"
    assert q.class_names == ["chat-reuse", "chat-fresh", "offline-reuse", "offline-fresh", "admin"]
    assert q.default_family == "chat"
    assert [(b.name, b.min_tokens) for b in q.cache_buckets] == [("reuse", 0), ("fresh", 2048)]
    assert q.classify("offline", 0) == "offline-reuse"
    assert q.classify("offline", 2047) == "offline-reuse"
    assert q.classify("offline", 2048) == "offline-fresh"
    assert q.classify(None, 2047) == "chat-reuse"
    assert q.classify(None, 2048) == "chat-fresh"
    assert q.classify("chat", 10**12) == "chat-fresh"
    # unknown / empty / a matrix class's own name: the default family
    assert q.classify("premium", 5000) == "chat-fresh"
    assert q.classify("", 0) == "chat-reuse"
    assert q.classify("offline-fresh", 0) == "chat-reuse"
    # the explicit class, by its exact name, whatever the tokens
    assert q.classify("admin", 0) == q.classify("admin", 10**9) == "admin"
    pc = {c.name: c for c in q.policy_classes}
    assert pc["chat-fresh"].busy_worker_ratio == 0.75
    assert pc["chat-reuse"].request_queue_limit_per_worker == 256


def test_push_request_routes_and_snapshots() -> None:
    q = DRRQueue.from_config(EXAMPLE)
    q.push_request("a", "offline", raw_isl_tokens=3000, cached_tokens=953)  # 2047 uncached
    q.push_request("b", "offline", raw_isl_tokens=3000, cached_tokens=952)  # 2048
    q.push_request("c", None, raw_isl_tokens=10, cached_tokens=10)
    q.push_request("d", "admin", raw_isl_tokens=99999)
    assert [q.depth(n) for n in q.class_names] == [1, 0, 1, 1, 1]
    assert q.head_cost("chat-reuse") == 1  # fully cached: cost clamped to 1
    st = q.stats()["offline-reuse"]
    assert (st["queued_raw_isl_tokens"], st["queued_cached_tokens"], st["queued_cost"]) == (
        3000,
        953,
        2047,
    )


def test_model_profiles_replace_the_root_wholesale() -> None:
    q = DRRQueue.from_config(EXAMPLE, model="tiny-draft")
    assert q.class_names == ["draft"]
    assert q.classify("chat", 10**6) == q.classify("admin", 0) == "draft"
    # a model without a profile: the root
    assert DRRQueue.from_config(EXAMPLE, model="other").class_names[0] == "chat-reuse"
    q = DRRQueue.from_config(DOC, model="llama")
    assert q.class_names == ["fast", "slow", "ops"]
    assert q.classify("slow", 0) == "slow" and q.classify("chat", 0) == "fast"
    assert q.classify("ops", 0) == "ops" and q.classify("admin", 0) == "fast"
    # no root: the synthetic default class takes everything
    rootless = {"models": DOC["models"]}
    q = DRRQueue.from_config(rootless, model="other")
    assert q.class_names == ["default"] and q.classify("anything", 7) == "default"


def test_json_and_yaml_files_agree(tmp_path: Path) -> None:
    p = tmp_path / "policy.json"
    p.write_text(json.dumps(DOC))
    yaml = pytest.importorskip("yaml")
    y = tmp_path / "policy.yml"
    y.write_text(yaml.safe_dump(DOC))
    a, b = DRRQueue.from_config(p, model="llama"), DRRQueue.from_config(y, model="llama")
    assert a.class_names == b.class_names == ["fast", "slow", "ops"]


@pytest.mark.parametrize(
    ("name", "text", "line", "what"),
    [
        ("policy.yaml", "policy_classes:\n  - name: a\n    quantum: [1\n", 4, "not valid YAML"),
        ("policy.yml", "a: b\n  c: d\n", 2, "not valid YAML"),
        ("policy.json", '{"policy_classes": [\n  {"name": "a",}\n]}', 2, "not valid JSON"),
    ],
)
def test_malformed_file_names_the_file_and_line(
    tmp_path: Path, name: str, text: str, line: int, what: str
) -> None:
    """Not a bare ``yaml.parser.ParserError`` (issue 20, item 5)."""
    if name.endswith((".yaml", ".yml")):
        pytest.importorskip("yaml")
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(p))}:{line}: {what} \("):
        DRRQueue.from_config(p)


def test_yaml_without_pyyaml_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    p = tmp_path / "policy.yaml"
    p.write_text("policy_classes: []\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ImportError, match=r"needs yaml: pip install '\.\[yaml\]'"):
        DRRQueue.from_config(p)


# --- per-worker limits ------------------------------------------------------


def limited(num_workers: int) -> DRRQueue:
    return DRRQueue.from_config(
        doc(
            policy_classes__0__request_queue_limit_per_worker=2,
            policy_classes__1__raw_isl_token_queue_limit_per_worker=1000,
            policy_classes__2__cached_token_queue_limit_per_worker=100,
        ),
        num_workers=num_workers,
    )


def test_request_limit_with_one_worker() -> None:
    q = limited(1)
    q.push_request(1, "chat", 10)
    q.push_request(2, "chat", 10)
    before = snap(q)
    with pytest.raises(QueueFull) as ei:
        q.push_request(3, "chat", 10)
    e = ei.value
    assert (e.class_name, e.limit, e.current, e.max) == (
        "chat-reuse",
        "request_queue_limit_per_worker",
        2,
        2,
    )
    assert "request_queue_limit_per_worker" in str(e)
    assert snap(q) == before


def test_limits_scale_with_workers_changed_at_run_time() -> None:
    q = limited(3)
    for k in range(6):
        q.push_request(k, "chat", 10)
    with pytest.raises(QueueFull):
        q.push_request(6, "chat", 10)
    q.num_workers = 4
    q.push_request(7, "chat", 10)
    q.push_request(8, "chat", 10)
    with pytest.raises(QueueFull):
        q.push_request(9, "chat", 10)
    q.num_workers = 1  # shrinking evicts nothing; pushes refuse until drained
    assert q.depth("chat-reuse") == 8
    with pytest.raises(QueueFull):
        q.push_request(10, "chat", 10)
    q.num_workers = 0
    with pytest.raises(QueueFull):
        q.push_request(11, "chat", 10)
    q.push_request(12, "admin", 10)  # a class without limits is unaffected


def test_token_limits_check_usage_before_the_push() -> None:
    q = limited(2)  # chat-fresh: 2000 raw tokens; off-reuse: 200 cached tokens
    q.push_request("a", "chat", 5000, 2000)  # 3000 uncached: fresh; 5000 raw crosses 2000
    assert q.depth("chat-fresh") == 1
    with pytest.raises(QueueFull) as ei:
        q.push_request("b", "chat", 2048)
    assert (ei.value.limit, ei.value.current, ei.value.max) == (
        "raw_isl_token_queue_limit_per_worker",
        5000,
        2000,
    )
    q.push_request("c", "offline", 500, 300)  # 300 cached crosses 200: accepted
    with pytest.raises(QueueFull) as ei:
        q.push_request("d", "offline", 10)
    assert (ei.value.limit, ei.value.current, ei.value.max) == (
        "cached_token_queue_limit_per_worker",
        300,
        200,
    )


def test_constructor_takes_num_workers_and_dynamo_fields() -> None:
    q = DRRQueue([PolicyClass("a", 1, request_queue_limit_per_worker=1)], num_workers=2)
    q.push(1, "a", 1)
    q.push(2, "a", 1)
    with pytest.raises(QueueFull):
        q.push(3, "a", 1)
    assert q.policy_classes[0].request_queue_limit_per_worker == 1


@pytest.mark.parametrize("bad", [-1, 1.5, "2", None, True, 2**64])
def test_num_workers_rejects_bad_values(bad: Any) -> None:
    q = limited(1)
    before = snap(q)
    with pytest.raises((TypeError, ValueError), match="num_workers"):
        q.num_workers = bad
    assert snap(q) == before
    if bad is not None:
        with pytest.raises((TypeError, ValueError), match="num_workers"):
            DRRQueue.from_config(DOC, num_workers=bad)


# --- thresholds ---------------------------------------------------------------


def gated() -> DRRQueue:
    return DRRQueue.from_config(
        doc(
            policy_classes__0__prefill_busy_threshold=100,  # chat-reuse: absolute
            policy_classes__1__prefill_busy_threshold_frac=2.0,  # chat-fresh: fractional
            policy_classes__1__busy_worker_ratio=0.5,
            policy_classes__2__prefill_busy_threshold=100,  # off-reuse: same rule as 0
        )
    )


def test_absolute_threshold_blocks_when_every_worker_is_busy() -> None:
    q = gated()
    q.push_request("r", "chat", 10)
    q.push_request("x", "admin", 10)
    before = snap(q)
    # all workers above 100: chat-reuse blocked, earns no credit; admin (no
    # threshold) is never blocked
    assert q.pop(active_prefill_tokens=[101, 500], max_num_batched_tokens=8) == ("admin", "x")
    assert q.deficit("chat-reuse") == 0
    assert q.pop(active_prefill_tokens=[101, 500], max_num_batched_tokens=8) is None
    assert snap(q)[3]["chat-reuse"] == before[3]["chat-reuse"]
    # 100 is not > 100: one idle worker opens the pool
    assert q.pop(active_prefill_tokens=[100, 500], max_num_batched_tokens=8) == ("chat-reuse", "r")


def test_fractional_threshold_and_busy_worker_ratio() -> None:
    q = gated()
    q.push_request("f", "chat", 4000)
    # busy: t > 2 * max; ratio 0.5 of 4 workers: 2 busy workers block
    assert q.pop(active_prefill_tokens=[201, 201, 0, 0], max_num_batched_tokens=100) is None
    assert q.pop(active_prefill_tokens=[201, 200, 0, 0], max_num_batched_tokens=100) == (
        "chat-fresh",
        "f",
    )
    q.push_request("g", "chat", 4000)
    # per-worker max_num_batched_tokens
    assert q.pop(active_prefill_tokens=[201, 401, 0], max_num_batched_tokens=[100, 200, 1]) is None
    assert q.pop(active_prefill_tokens=[201, 401, 0], max_num_batched_tokens=[100, 201, 1]) == (
        "chat-fresh",
        "g",
    )


def test_no_eligible_worker_is_not_blocked() -> None:
    q = gated()
    q.push_request("r", "chat", 10)
    assert q.pop(active_prefill_tokens=[]) == ("chat-reuse", "r")


def test_load_combines_with_blocked_and_dispatchable() -> None:
    q = gated()
    q.push_request("r", "chat", 10)
    q.push_request("o", "offline", 10)
    q.push_request("x", "admin", 10)
    asked: list[str] = []

    def pred(name: str, item: Any) -> bool:
        asked.append(name)
        return True

    got = q.pop({"admin"}, pred, active_prefill_tokens=[500], max_num_batched_tokens=8)
    assert got is None and asked == []  # load blocks both, the set blocks admin
    assert q.pop(None, pred, active_prefill_tokens=[5], max_num_batched_tokens=8) == (
        "chat-reuse",
        "r",
    )
    assert sorted(asked) == ["admin", "chat-reuse", "off-reuse"]  # each asked once


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(active_prefill_tokens=[1, -2]), ValueError, r"active_prefill_tokens\[1\]"),
        (dict(active_prefill_tokens=[1, 2.5]), TypeError, r"active_prefill_tokens\[1\]"),
        (dict(active_prefill_tokens=[True]), TypeError, r"active_prefill_tokens\[0\]"),
        (dict(active_prefill_tokens="12"), TypeError, "active_prefill_tokens"),
        (dict(active_prefill_tokens=5), TypeError, "active_prefill_tokens"),
        (dict(active_prefill_tokens=[1], max_num_batched_tokens=-1), ValueError, "max_num"),
        (
            dict(active_prefill_tokens=[1, 2], max_num_batched_tokens=[1]),
            ValueError,
            "max_num_batched_tokens has 1 entries",
        ),
        (dict(active_prefill_tokens=[1]), ValueError, "max_num_batched_tokens is required"),
        (dict(max_num_batched_tokens=5), ValueError, "needs active_prefill_tokens"),
    ],
)
def test_bad_load_snapshot_names_the_field_and_changes_nothing(
    kw: dict[str, Any], exc: type, match: str
) -> None:
    q = gated()
    q.push_request("r", "chat", 4000)
    before = snap(q)
    with pytest.raises(exc, match=match):
        q.pop(**kw)
    assert snap(q) == before


def test_load_accepts_numpy_arrays() -> None:
    np = pytest.importorskip("numpy")
    q = gated()
    q.push_request("r", "chat", 10)
    assert q.pop(active_prefill_tokens=np.array([101, 102]), max_num_batched_tokens=8) is None
    assert q.pop(
        active_prefill_tokens=np.array([1, 102], dtype=np.uint32),
        max_num_batched_tokens=np.array([8, 8]),
    ) == ("chat-reuse", "r")
    q.push_request("s", "chat", 10)
    before = snap(q)
    with pytest.raises(ValueError, match=r"active_prefill_tokens\[1\] must be an integer >= 0"):
        q.pop(active_prefill_tokens=np.array([1, -3]), max_num_batched_tokens=8)
    with pytest.raises(ValueError, match=r"max_num_batched_tokens has 1 entries"):
        q.pop(active_prefill_tokens=np.array([1, 3]), max_num_batched_tokens=np.array([8]))
    assert snap(q) == before


# --- every configuration error names its field ------------------------------

ERRORS: list[tuple[dict[str, Any], str]] = [
    (doc(policy_classes__2__quantum=0), r"^policy_classes\[2\]\.quantum must be an integer > 0"),
    (doc(policy_classes__2__quantum=...), r"^policy_classes\[2\]\.quantum is required"),
    (doc(policy_classes__2__quantum=2**64), r"policy_classes\[2\]\.quantum .*2\*\*64"),
    (doc(policy_classes__2__quantum="8"), r"policy_classes\[2\]\.quantum .*got '8'"),
    (
        doc(models__llama__policy_classes__2__quantum=0),
        r"^models\.llama\.policy_classes\[2\]\.quantum must be an integer > 0",
    ),
    (
        doc(models__llama__policy_classes__0__bogus=1),
        r"^models\.llama\.policy_classes\[0\]: unknown field 'bogus'",
    ),
    (doc(models__llama__extra=1), r"^models\.llama: unknown field 'extra'"),
    (
        doc(models__llama__uncached_isl_buckets=...),
        r"^models\.llama\.uncached_isl_buckets is required",
    ),
    (
        {"models": {"a/b": DOC["models"]["llama"] | {"default_policy_family": "zz"}}},
        r'^models\["a/b"\]\.default_policy_family \'zz\' is not the policy_family',
    ),
    (doc(models={"": DOC["models"]["llama"]}), r"^models has a model profile with an empty name"),
    (doc(models=[]), r"^models must be a mapping"),
    (doc(policy_classes__0__queue_policy="lcfs"), r"policy_classes\[0\]\.queue_policy .*'lcfs'"),
    (doc(policy_classes__0__queue_policy=1), r"policy_classes\[0\]\.queue_policy .*got 1"),
    (
        doc(policy_classes__0__max_queued_requests=1),
        r"policy_classes\[0\]: unknown field 'max_queued_requests'.*request_queue_limit_per_worker",
    ),
    (doc(policy_classes__0__name="a b"), r"policy_classes\[0\]\.name 'a b' must match"),
    (doc(policy_classes__0__name=""), r"policy_classes\[0\]\.name must be a non-empty string"),
    (doc(policy_classes__0__name=...), r"policy_classes\[0\]\.name is required"),
    (doc(policy_classes__1__name="chat-reuse"), r"policy_classes\[1\]\.name .*duplicate"),
    (
        doc(policy_classes__0__policy_family="bad/fam"),
        r"policy_classes\[0\]\.policy_family 'bad/fam' must match",
    ),
    (
        doc(policy_classes__1__cache_bucket=...),
        r"policy_classes\[1\] must specify both policy_family and cache_bucket",
    ),
    (
        doc(policy_classes__4__cache_bucket="reuse"),
        r"policy_classes\[4\] must specify both",
    ),
    (
        doc(policy_classes__1__cache_bucket="hot"),
        r"policy_classes\[1\]\.cache_bucket 'hot' is not a configured cache bucket",
    ),
    (
        doc(policy_classes__1__cache_bucket="reuse"),
        r"policy_classes\[1\] has policy_family 'chat' x cache_bucket 'reuse'.*exactly one",
    ),
    (
        doc(policy_classes__4__name="offline"),
        r"policy_classes\[4\]\.name 'offline' names an explicit class.*collides",
    ),
    (doc(policy_classes=[]), r"^policy_classes must be a non-empty list"),
    (doc(policy_classes=3), r"^policy_classes must be a non-empty list, got 3"),
    (doc(policy_classes__0=5), r"^policy_classes\[0\] must be a mapping"),
    (doc(default_policy_family="vip"), r"^default_policy_family 'vip' is not the policy_family"),
    (doc(default_policy_family=...), r"^default_policy_family is missing.*together"),
    (doc(uncached_isl_buckets=...), r"^uncached_isl_buckets is missing"),
    (doc(uncached_isl_buckets=[]), r"^uncached_isl_buckets must be a non-empty list"),
    (
        doc(uncached_isl_buckets__0__min_tokens=1),
        r"^uncached_isl_buckets\[0\]\.min_tokens must be 0",
    ),
    (
        doc(uncached_isl_buckets__1__min_tokens=0),
        r"^uncached_isl_buckets\[1\]\.min_tokens must be strictly greater than 0",
    ),
    (
        doc(uncached_isl_buckets__1__min_tokens=-5),
        r"^uncached_isl_buckets\[1\]\.min_tokens must be an integer >= 0",
    ),
    (
        doc(uncached_isl_buckets__1__bucket="reuse"),
        r"^uncached_isl_buckets\[1\]\.bucket 'reuse' is a duplicate",
    ),
    (doc(uncached_isl_buckets__1__bucket=...), r"^uncached_isl_buckets\[1\]\.bucket is required"),
    (doc(uncached_isl_buckets__1__name="x"), r"^uncached_isl_buckets\[1\]: unknown field 'name'"),
    (
        doc(policy_classes__0__prefill_busy_threshold_frac=-0.5),
        r"policy_classes\[0\]\.prefill_busy_threshold_frac must be a finite number >= 0",
    ),
    (
        doc(policy_classes__0__prefill_busy_threshold_frac=float("nan")),
        r"policy_classes\[0\]\.prefill_busy_threshold_frac .*nan",
    ),
    (
        doc(policy_classes__0__prefill_busy_threshold=-1),
        r"policy_classes\[0\]\.prefill_busy_threshold must be an integer >= 0",
    ),
    (
        doc(policy_classes__0__busy_worker_ratio=0.5),
        r"policy_classes\[0\]\.busy_worker_ratio needs prefill_busy_threshold",
    ),
    (
        doc(policy_classes__0__busy_worker_ratio=16.0, policy_classes__0__prefill_busy_threshold=1),
        r"policy_classes\[0\]\.busy_worker_ratio must be a fraction .*16\.0",
    ),
    (
        doc(policy_classes__0__busy_worker_ratio=0, policy_classes__0__prefill_busy_threshold=1),
        r"policy_classes\[0\]\.busy_worker_ratio must be a fraction",
    ),
    (
        doc(policy_classes__0__request_queue_limit_per_worker=-1),
        r"policy_classes\[0\]\.request_queue_limit_per_worker must be an integer >= 0",
    ),
    (
        doc(policy_classes__0__raw_isl_token_queue_limit_per_worker=1.0),
        r"policy_classes\[0\]\.raw_isl_token_queue_limit_per_worker must be an integer",
    ),
    (
        doc(policy_classes__0__cached_token_queue_limit_per_worker=[1]),
        r"policy_classes\[0\]\.cached_token_queue_limit_per_worker must be an integer",
    ),
    (doc(bogus=1), r"unknown field 'bogus'"),
    (
        doc(default_family="chat"),
        r"mixes fairq's schema .* default_family -> default_policy_family",
    ),
    (doc(cache_buckets=[]), r"mixes fairq's schema .*cache_buckets -> uncached_isl_buckets"),
    ({"models": {}}, r"must define a root profile"),
]


@pytest.mark.parametrize("cfg, match", ERRORS)
def test_every_config_error_names_its_field(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DRRQueue.from_config(cfg)


def test_type_errors_name_what_is_wrong(tmp_path: Path) -> None:
    p = tmp_path / "list.json"
    p.write_text("[1]")
    with pytest.raises(TypeError, match="policy config must be a mapping, got a list"):
        DRRQueue.from_config(p)
    with pytest.raises(TypeError, match="mapping keys must be strings"):
        DRRQueue.from_config(doc(models={1: {}}))
    with pytest.raises(TypeError, match="model must be a str"):
        DRRQueue.from_config(DOC, model=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no models: section"):
        DRRQueue.from_config({"policy_classes": [{"name": "a", "quantum": 1}]}, model="m")


def test_worker_selection_is_accepted_and_not_interpreted() -> None:
    q = DRRQueue.from_config({"worker_selection": {"aggregated": "x", "instances": []}})
    assert q.class_names == ["default"]


# --- hostile input (the fuzz suite's checks) --------------------------------

DYNAMO_FIELDS = [
    ("default_policy_family",),
    ("uncached_isl_buckets",),
    ("uncached_isl_buckets", 1, "min_tokens"),
    ("uncached_isl_buckets", 1, "bucket"),
    ("policy_classes",),
    ("policy_classes", 1),
    ("policy_classes", 1, "name"),
    ("policy_classes", 1, "quantum"),
    ("policy_classes", 1, "queue_policy"),
    ("policy_classes", 1, "policy_family"),
    ("policy_classes", 1, "cache_bucket"),
    ("policy_classes", 1, "prefill_busy_threshold"),
    ("policy_classes", 1, "prefill_busy_threshold_frac"),
    ("policy_classes", 1, "busy_worker_ratio"),
    ("policy_classes", 1, "request_queue_limit_per_worker"),
    ("policy_classes", 1, "raw_isl_token_queue_limit_per_worker"),
    ("policy_classes", 1, "cached_token_queue_limit_per_worker"),
    ("models",),
    ("models", "llama"),
    ("models", "llama", "policy_classes", 0, "quantum"),
    ("worker_selection",),
]


@given(where=st.sampled_from(DYNAMO_FIELDS), v=hostile)
@FUZZ
def test_dynamo_config_hostile_values(where: tuple[Any, ...], v: Any) -> None:
    """Any value anywhere: a clean ValueError/TypeError (naming the field when
    it is a leaf the schema knows), never a panic or a crash."""
    cfg = copy.deepcopy(DOC)
    cur: Any = cfg
    for k in where[:-1]:
        cur = cur[k]
    cur[where[-1]] = v
    ok, e = attempt(lambda: None, DRRQueue.from_config, cfg, user_exc=False)
    if not ok and isinstance(e, ValueError) and isinstance(where[-1], str) and len(where) > 1:
        assert where[-1] in str(e) or "must be a mapping" in str(e), e


@given(tokens=hostile, mx=hostile)
@FUZZ
def test_load_snapshot_hostile_values(tokens: Any, mx: Any) -> None:
    q = gated()
    q.push_request("r", "chat", 4000)
    q.push_request("s", "offline", 10)

    def snap_() -> Any:
        return snap(q)

    ok, e = attempt(snap_, q.pop, active_prefill_tokens=tokens, max_num_batched_tokens=mx)
    if not ok and isinstance(e, ValueError | TypeError) and not isinstance(e, Boom):
        assert "active_prefill_tokens" in str(e) or "max_num_batched_tokens" in str(e), e
