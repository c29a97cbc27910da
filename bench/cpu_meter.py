"""CPU seconds spent by groups of processes over a stretch of a benchmark, from Linux's /proc,
and the share of the host's time its hypervisor took (steal): on a shared 2-core machine a
latency percentile moves with both, and they tell a slow run of ours from a busy host."""

import os
from pathlib import Path

PROC = Path("/proc")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def available() -> bool:
    return (PROC / "stat").exists()


def children(pid: int) -> list[int]:
    """The direct children of `pid`."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _stat(int(entry.name))[1] == pid:
            found.append(int(entry.name))
    return found


def named(prefix: str) -> list[int]:
    """Processes whose command line starts with `prefix` (PostgreSQL's backends: "postgres")."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if command.startswith(prefix.encode()):
                found.append(int(entry.name))
    return found


def _stat(pid: int) -> tuple[float, int]:
    """CPU seconds (user and system, all threads) and parent of `pid`; (0, -1) if gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0, -1
    return (int(fields[11]) + int(fields[12])) * TICK_S, int(fields[1])


def _host() -> tuple[int, int]:
    """Steal and total ticks of the whole host since boot."""
    values = [int(value) for value in (PROC / "stat").read_text().split("\n")[0].split()[1:]]
    return values[7] if len(values) > 7 else 0, sum(values[:8])


class CpuMeter:
    """`start(groups)` with named lists of pids, `stop()` for each group's CPU seconds since
    and the host's steal share. Processes that end meanwhile count up to their last reading."""

    def start(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.before = {pid: _stat(pid)[0] for pids in groups.values() for pid in pids}
        self.host_before = _host()

    def stop(self) -> tuple[dict[str, float], float]:
        spent = {
            name: sum(max(0.0, _stat(pid)[0] - self.before[pid]) for pid in pids)
            for name, pids in self.groups.items()
        }
        steal, total = (now - then for now, then in zip(_host(), self.host_before, strict=True))
        return spent, steal / total if total else 0.0
