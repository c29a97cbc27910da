"""CPU seconds spent by groups of processes over a stretch of a benchmark, from Linux's /proc,
and the share of the host's time its hypervisor took (steal): on a shared 2-core machine a
latency percentile moves with both, and they tell a slow run of ours from a busy host.

A group is a process tree: its root, the root's descendants alive at the reading, and the
descendants that ended and were reaped meanwhile (the kernel adds a reaped child's time to its
parent's "cutime" and "cstime"). So PostgreSQL's backends, opened and closed as connections
age out, count in full under their postmaster, as gunicorn's workers do under its master."""

import os
import time
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


class _Process(NamedTuple):
    parent: int
    own: float  # CPU seconds of the process itself, all threads, user and system
    reaped: float  # CPU seconds of its descendants that ended and were waited for


def host_speed_ms(rounds: int = 5) -> float:
    """Milliseconds a fixed piece of pure Python takes here, the best of `rounds`. Machines of
    one kind differ in speed, and a request's CPU scales with this, so it lets runs on
    different hosts be compared."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        table: dict[str, int] = {}
        for number in range(200_000):
            key = f"k{number % 997}"
            table[key] = table.get(key, 0) + len(key)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def available() -> bool:
    return (PROC / "stat").exists()


def _processes() -> dict[int, _Process]:
    found = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we listed
        found[int(entry.name)] = _Process(
            parent=int(fields[1]),
            own=(int(fields[11]) + int(fields[12])) * TICK_S,
            reaped=(int(fields[13]) + int(fields[14])) * TICK_S,
        )
    return found


def postgres_root() -> int | None:
    """PostgreSQL's postmaster on this host: the parent of its "postgres: …" processes."""
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"postgres:"):
                    return _processes().get(int(entry.name), _Process(-1, 0, 0)).parent
            except OSError:
                continue
    return None


def _tree_seconds(root: int, table: dict[int, _Process], apart: set[int]) -> float:
    """CPU seconds of `root`'s tree, leaving out the subtrees of the roots in `apart`."""
    children: dict[int, list[int]] = {}
    for pid, process in table.items():
        children.setdefault(process.parent, []).append(pid)
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        if pid in table:
            total += table[pid].own + table[pid].reaped
        pending.extend(child for child in children.get(pid, []) if child not in apart)
    return total


def _host() -> tuple[int, int]:
    """Steal and total ticks of the whole host since boot."""
    values = [int(value) for value in (PROC / "stat").read_text().split("\n")[0].split()[1:]]
    return values[7] if len(values) > 7 else 0, sum(values[:8])


class CpuMeter:
    """`start(roots)` with a root pid per named group, `stop()` for each group's CPU seconds
    since and the host's steal share. A group's tree stops at another group's root, so the
    bench client's group does not also count the server and judge it started."""

    def start(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.before = self._reading()
        self.host_before = _host()

    def stop(self) -> tuple[dict[str, float], float]:
        after = self._reading()
        spent = {name: max(0.0, after[name] - self.before[name]) for name in self.roots}
        steal, total = (now - then for now, then in zip(_host(), self.host_before, strict=True))
        return spent, steal / total if total else 0.0

    def _reading(self) -> dict[str, float]:
        table, apart = _processes(), set(self.roots.values())
        return {
            name: _tree_seconds(root, table, apart - {root}) for name, root in self.roots.items()
        }
