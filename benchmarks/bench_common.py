"""Shared pieces of ``compare.py``: cases, sampling, byte counters and machine facts.

A *case* is one system on one store doing one workload. Every case returns the wall time
of one run and how many steps that run committed, so all systems are reported in the
same unit (µs per committed step). Byte counts come from a separate, untimed run of the
same case, so counting never slows the timed runs down.
"""

from __future__ import annotations

import gc
import os
import platform
import sqlite3
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import redis

__all__ = [
    "Case",
    "Counted",
    "Latency",
    "Result",
    "Timed",
    "file_bytes",
    "latency",
    "machine_facts",
    "measure",
    "redis_bytes_in",
    "wchar",
]

LIBRARIES = (
    "phasegraph",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "apache-burr",
    "transitions",
    "msgpack",
    "msgspec",
    "redis",
    "hiredis",
)


@dataclass(frozen=True, slots=True)
class Timed:
    """One timed run: wall seconds and the steps it committed."""

    seconds: float
    steps: int


@dataclass(frozen=True, slots=True)
class Counted:
    """One counted run, in bytes per committed step.

    Attributes:
        payload: Bytes the framework handed its store (encoded records, snapshots,
            checkpoints, state JSON) — before the store's own overhead.
        written: Bytes that reached the OS or the wire: for SQLite the growth of the
            process's ``wchar`` (every ``write``/``pwrite``, so the WAL or rollback
            journal, checkpoints and pages included); for Redis the growth of the
            server's ``total_net_input_bytes`` (commands and their arguments).
    """

    payload: float | None
    written: float | None


@dataclass(slots=True)
class Case:
    """One system on one store running one workload."""

    system: str
    store: str
    run: Callable[[], Timed]
    count: Callable[[], Counted] | None = None
    peer: str | None = None  # the phasegraph store this row is compared with
    note: str = ""


@dataclass(slots=True)
class Result:
    """Medians of a case's samples."""

    section: str
    system: str
    store: str
    us_per_step: float
    steps: int
    samples: list[float] = field(default_factory=list)
    counted: Counted | None = None
    peer: str | None = None
    note: str = ""


def measure(
    section: str, cases: list[Case], repeat: int, log: Callable[[str], None]
) -> list[Result]:
    """Run every case ``repeat`` times, round robin (so drift hits all alike), then count."""
    samples: dict[int, list[Timed]] = {i: [] for i in range(len(cases))}
    for _ in range(repeat):
        for i, case in enumerate(cases):
            gc.collect()
            samples[i].append(case.run())
    results = []
    for i, case in enumerate(cases):
        per_step = [t.seconds / t.steps * 1e6 for t in samples[i]]
        gc.collect()
        counted = case.count() if case.count else None
        result = Result(
            section=section,
            system=case.system,
            store=case.store,
            us_per_step=statistics.median(per_step),
            steps=samples[i][0].steps,
            samples=per_step,
            counted=counted,
            peer=case.peer,
            note=case.note,
        )
        log(
            f"  {section:<28} {case.system:<11} {case.store:<22} "
            f"{result.us_per_step:9.1f} µs/step  (min {min(per_step):.1f}, max {max(per_step):.1f})"
        )
        results.append(result)
    return results


def wchar() -> int:
    """Bytes this process has passed to ``write``-family system calls so far (Linux)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def redis_bytes_in(client: redis.Redis) -> int:
    """Bytes the Redis server has received from all clients so far."""
    return int(client.info("stats")["total_net_input_bytes"])


def file_bytes(path: Path) -> int:
    """Size of a SQLite database with its WAL and journal files."""
    total = 0
    for suffix in ("", "-wal", "-journal"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            total += candidate.stat().st_size
    return total


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_facts(client: redis.Redis) -> list[str]:
    """Lines describing the machine and the software measured."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    server = client.info("server")
    libraries = ", ".join(f"{name} {_version(name)}" for name in LIBRARIES)
    return [
        f"machine: {cores} cores (nproc), {_cpu_model()}, {_memory()} RAM, "
        f"{platform.system()} {platform.release()}",
        f"python: {platform.python_implementation()} {sys.version.split()[0]}; "
        f"SQLite {sqlite3.sqlite_version}; Redis server {server.get('redis_version')} "
        "on 127.0.0.1 (loopback)",
        f"libraries: {libraries}",
    ]


@dataclass(slots=True)
class Latency:
    """Median milliseconds of one operation (resume, history) or a throughput."""

    section: str
    system: str
    store: str
    value: float
    unit: str  # "ms" (lower is better) or "steps/s" (higher is better)
    samples: list[float] = field(default_factory=list)
    peer: str | None = None
    note: str = ""


def latency(
    section: str,
    system: str,
    store: str,
    samples: list[float],
    *,
    unit: str = "ms",
    peer: str | None = None,
    note: str = "",
) -> Latency:
    """A :class:`Latency` of the median of ``samples``."""
    return Latency(
        section, system, store, statistics.median(samples), unit, samples, peer=peer, note=note
    )
