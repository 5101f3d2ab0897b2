"""fairq's vLLM settings checked before vLLM loads a model
(:mod:`fairq.vllm.preflight`, the ``vllm.general_plugins`` entry point).

Cheap: no vLLM needed. tests/test_vllm_server.py starts real servers with
bad settings (the plugin's one line, then the scheduler class's own check
with the plugin left out)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fairq.vllm import preflight

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in preflight.ENV_VARS:
        monkeypatch.delenv(var, raising=False)


def _set(monkeypatch: pytest.MonkeyPatch, policy: str | None, options: str | None) -> None:
    if policy is not None:
        monkeypatch.setenv("FAIRQ_VLLM_POLICY", policy)
    if options is not None:
        monkeypatch.setenv("FAIRQ_VLLM_OPTIONS", options)


def test_registered_as_a_vllm_general_plugin() -> None:
    path = ROOT / "pyproject.toml"
    if not path.exists():
        pytest.skip("no pyproject.toml beside the tests")
    text = path.read_text()
    head = '[project.entry-points."vllm.general_plugins"]\n'
    assert head + 'fairq = "fairq.vllm.preflight:plugin"\n' in text


def test_nothing_set_checks_nothing() -> None:
    assert preflight.check_environment() is None
    preflight.plugin()  # no error, no exit


@pytest.mark.parametrize(
    "policy, options, checked",
    [
        ("dlpm", '{"quantum": 512, "tenant_weights": {"a": 2}}', "dlpm"),
        ("vtc", '{"tenant": {"order": ["extra_args", "lora"]}}', "vtc"),
        ("wfq", '{"virtual_clock": "finish", "state_file": "/tmp/x.json"}', "wfq"),
        ("fcfs", None, "fcfs"),
        ("dlpm", '{"dual_phase": {"output_budget": 2}}', "dlpm"),
        (None, '{"state_file": "/tmp/x.json"}', ""),
    ],
)
def test_good_settings_pass(
    monkeypatch: pytest.MonkeyPatch, policy: str | None, options: str | None, checked: str
) -> None:
    _set(monkeypatch, policy, options)
    assert preflight.check_environment() == checked


BAD = [
    ("dlpm", '{"quantm": 512}', "unknown option 'quantm' for policy 'dlpm'"),
    ("dlpm", '{"quantum": -5}', "quantum"),
    ("vtc", '{"tenant": {"order": ["nope"]}}', "tenant.order"),
    ("bogus", None, "FAIRQ_VLLM_POLICY='bogus' is not a fairq policy"),
    ("wfq", '{"virtual_clock": "x"}', "virtual_clock"),
    ("fcfs", '{"quantum": 1}', "unknown option 'quantum' for policy 'fcfs'"),
    ("dlpm", '{"dual_phase": {"foo": 1}}', "dual_phase.foo"),
    (None, "{bad", "FAIRQ_VLLM_OPTIONS is not valid JSON"),
    (None, '{"state_interval_s": 0}', "state_interval_s"),
    # the front door's options, which a queue policy (or none) passes by
    ("fcfs", '{"limits": {"max_requests": 0}}', "limits.max_requests"),
    (None, '{"limits": {"max_tokens": "many"}}', "limits.max_tokens"),
    ("wfq", '{"tenant_weights": {"a": -1}}', "tenant_weights"),
]


@pytest.mark.parametrize("policy, options, text", BAD)
def test_bad_settings_raise_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, policy: str | None, options: str | None, text: str
) -> None:
    _set(monkeypatch, policy, options)
    with pytest.raises((ValueError, TypeError)) as e:
        preflight.check_environment()
    assert text in str(e.value)


@pytest.mark.parametrize("policy, options, text", BAD)
def test_from_vllms_command_line_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    policy: str | None,
    options: str | None,
    text: str,
) -> None:
    _set(monkeypatch, policy, options)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/vllm", "serve", "MODEL"])
    with pytest.raises(SystemExit) as e:
        preflight.plugin()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairq: ") and text in err


def test_outside_vllms_command_line_it_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "dlpm", '{"quantm": 1}')
    monkeypatch.setattr(sys, "argv", ["my_program.py"])
    with pytest.raises(ValueError, match="quantm"):
        preflight.plugin()


class _Main:
    """A stand-in ``__main__`` module run with ``python -m NAME``."""

    def __init__(self, name: str) -> None:
        self.__spec__ = type("Spec", (), {"name": name})()


def test_vllms_registry_helper_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM inspects a model class in ``python -m
    vllm.model_executor.models.registry``, which loads the general plugins;
    a check failing there surfaced only as "Model architectures [...] failed
    to be inspected" (and vLLM kept that answer for the process)."""
    _set(monkeypatch, "dlpm", '{"quantm": 1}')
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setitem(sys.modules, "__main__", _Main("vllm.model_executor.models.registry"))
    preflight.plugin()  # no error, no exit
    for name in ("vllm.entrypoints.openai.api_server", "vllm.__main__"):
        monkeypatch.setitem(sys.modules, "__main__", _Main(name))
        with pytest.raises(SystemExit):
            preflight.plugin()


def test_vllms_registry_subprocess_runs_under_bad_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real helper: vLLM's ``_run_in_subprocess`` (its model inspection)
    with fairq's plugin installed and a bad setting in the environment."""
    pytest.importorskip("vllm")
    from importlib.metadata import entry_points

    if not any(e.name == "fairq" for e in entry_points(group="vllm.general_plugins")):
        pytest.skip("fairq is not installed here (its vLLM plugin is an entry point)")
    from functools import partial

    from vllm.model_executor.models import registry

    _set(monkeypatch, "dlpm", '{"quantm": 1}')
    # (a callable the subprocess can unpickle by reference)
    assert registry._run_in_subprocess(partial(int, "42")) == 42
