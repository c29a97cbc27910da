"""How long a training job's `import graders.engine.runtime` takes, from the installed wheel.

    python bench/runtime_import.py [--python 3.11] [--runs 21]

Builds the runtime's wheel from this checkout (graders/engine/pyproject.toml) and installs it
in the venv .ci/runtime-wheel built for the chosen Python (.venv-runtime/<version>, which holds
the wheel's dependencies), then starts that venv's interpreter `runs` times for each of
`import graders.engine.runtime` and `import json`, alternating so that a busy stretch of the
host charges both, and prints the median wall clock of each, the runtime's cost beyond a bare
interpreter start (median difference), their ratio, and the import alone as timed inside the
interpreter (no start or shutdown). A start is a fresh process with
nothing cached in memory but the OS's file cache, as a trainer's worker starts. Then one
`-X importtime` run lists the packages whose modules take most of the import (self time per
top-level package), and how long a fixed Python loop takes on this host, to compare runs
across hosts.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cpu_meter  # noqa: E402
from tests.runtime_wheel.wheel import (  # noqa: E402
    INTERPRETERS,
    VENVS,
    clean_environment,
    wheel_build,
    wheel_install,
)

RUNTIME = "import graders.engine.runtime"
BARE = "import json"
# The same import, timed inside the interpreter: without its start and shutdown.
TIMED = (
    "import time; started = time.perf_counter(); import graders.engine.runtime; "
    "print((time.perf_counter() - started) * 1000)"
)


def _wall_ms(python: Path, code: str, folder: Path) -> tuple[float, str]:
    """Wall clock of one interpreter start that runs `code`, and what it printed."""
    started = time.perf_counter()
    printed = subprocess.run(
        [str(python), "-c", code],
        cwd=folder, check=True, capture_output=True, text=True, env=clean_environment(),
    ).stdout  # fmt: skip
    return (time.perf_counter() - started) * 1000, printed


def heaviest_imports(python: Path, folder: Path, top: int = 6) -> list[tuple[str, float]]:
    """Top-level packages by the import time (ms) of their own modules in one
    `-X importtime` run: each module's self time, summed per top-level package."""
    result = subprocess.run(
        [str(python), "-X", "importtime", "-c", RUNTIME],
        cwd=folder, check=True, capture_output=True, text=True, env=clean_environment(),
    )  # fmt: skip
    totals: dict[str, float] = {}
    for line in result.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        package = name.strip().partition(".")[0]
        totals[package] = totals.get(package, 0.0) + int(own) / 1000
    return sorted(totals.items(), key=lambda item: -item[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default="3.11", choices=sorted(INTERPRETERS))
    parser.add_argument("--runs", type=int, default=21)
    options = parser.parse_args()
    python = VENVS / options.python / "bin" / "python"
    if not python.exists():
        sys.exit(f"no runtime venv for Python {options.python}: run .ci/runtime-wheel first")
    host_ms = cpu_meter.host_speed_ms()  # before anything else loads the machine

    with tempfile.TemporaryDirectory(prefix="runtime-import-") as scratch:
        folder = Path(scratch)  # the working directory: no checkout to import graders from
        wheel = wheel_build(folder, isolated=False)
        wheel_install(python, "--no-deps", "--force-reinstall", str(wheel))
        version = subprocess.run(
            [str(python), "-c", "import sys; print(sys.version.split()[0])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        _wall_ms(python, RUNTIME, folder)  # warm the file cache and the .pyc files
        runtime, bare, inside = [], [], []
        for _ in range(options.runs):
            runtime.append(_wall_ms(python, RUNTIME, folder)[0])
            bare.append(_wall_ms(python, BARE, folder)[0])
            inside.append(float(_wall_ms(python, TIMED, folder)[1]))
        heaviest = heaviest_imports(python, folder)

    runtime_ms, bare_ms = statistics.median(runtime), statistics.median(bare)
    extra_ms = statistics.median(r - b for r, b in zip(runtime, bare, strict=True))
    print(f"python:     {version} ({python})")
    print(f"runtime:    {RUNTIME!r}: median {runtime_ms:.0f} ms over {options.runs} starts")
    print(f"bare:       {BARE!r}: median {bare_ms:.0f} ms")
    print(f"cost:       {extra_ms:.0f} ms beyond a bare start; ratio {runtime_ms / bare_ms:.1f}x")
    print(f"import:     median {statistics.median(inside):.0f} ms timed inside the interpreter")
    print("heaviest:   " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in heaviest))
    print(f"host:       fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")


if __name__ == "__main__":
    main()
