"""What one Redis commit costs the server, and how often it wakes the client's event loop.

Run from the repository root, against a Redis nobody else is using (the server's
statistics are reset)::

    .venv/bin/python benchmarks/redis_commit_cost.py [--steps 2000]
        [--redis redis://127.0.0.1:6379/0]

The run is ``loop.yaml`` (one node, one committed step per iteration, tiny state) on the
Redis store, keys under a throwaway prefix, deleted afterwards. Measured over the run:

* **server µs per commit** — ``INFO commandstats``: ``usec_per_call`` of the command the
  store commits with (``evalsha`` or ``fcall``), after ``CONFIG RESETSTAT``: the time the
  server spent inside the command, the script included. Redis times it by the clock, not
  by CPU used, so a virtual machine whose other tenants take the core stretches it: the
  same work (about 61,000 server instructions per commit) measured 4.3 µs on one day and
  9.3 µs on another, on the same kind of machine (``--callgrind`` counts instructions);
* **server CPU per commit** — ``INFO cpu``: the CPU time of the server's main thread
  (user and system) over the run, per commit: every call of the step, with the reading
  and writing of its socket;
* **calls per commit** — every command the server counted, per commit (leases, reads);
* **wake-ups per commit** — how many times the event loop asked the OS for ready
  sockets (``selector.select`` calls that returned events), per commit.

With ``--callgrind``, a private ``redis-server`` is started under ``valgrind
--tool=callgrind`` instead (the URL is not used) for a short and a long run, and the
server's **instructions per commit** are ``(Ir(long) - Ir(short)) / (commits(long) -
commits(short))``: start-up and connection set-up cancel, and the machine's load cannot
move the figure. ``--base DIR`` measures another checkout's ``engine/`` the same way.

With ``--client``, the **client's instructions per step** are counted the same way
(``python`` under callgrind, ``PYTHONHASHSEED=0``, a 300- and a 1,300-step run) on the
memory store and on the Redis at ``--redis``, and their ratio printed: what a Redis step
costs the process beyond a memory one. The lease lasts an hour there, so no renewal (a
thread woken by the wall clock, which valgrind slows) lands in one run and not the other.
``benchmarks/instructions.py --cases memory,redis`` counts the same with the default lease.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from _callgrind import instructions, with_checkout

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from phasegraph import Engine, open_store  # noqa: E402

SHORT, LONG = 300, 1300

_CLIENT = r"""
import asyncio, sys, uuid
from phasegraph import Engine, RunOptions, open_store

async def main(url, count):
    if url.startswith("redis"):
        url += ("&" if "?" in url else "?") + "prefix=cli" + uuid.uuid4().hex[:8]
    async with open_store(url) as store:
        engine = Engine(store, options=RunOptions(lease_ttl=3600.0))
        await engine.run(engine.prepare({loop!r}), {{"steps": count}})

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


class _CountingSelector:
    """Wraps the loop's selector and counts the selects that returned events."""

    def __init__(self, inner: selectors.BaseSelector) -> None:
        self.inner = inner
        self.woken = 0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = self.inner.select(timeout)
        self.woken += bool(ready)
        return ready

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _server_cpu(client: redis.Redis) -> float:
    """Seconds of CPU the server's main thread has used (``INFO cpu``), user and system."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])


async def _run(url: str, steps: int) -> tuple[int, int, float]:
    """Commits, wake-ups, and the server main thread's CPU seconds, over ``steps`` steps."""
    loop = asyncio.get_running_loop()
    counting = _CountingSelector(loop._selector)  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url.split("?")[0])
    async with open_store(url) as store:
        engine = Engine(store)
        prepared = engine.prepare(HERE / "loop.yaml")
        await engine.run(prepared, {"steps": 20})  # connect, load the scripts
        admin.config_resetstat()
        cpu = _server_cpu(admin)
        loop._selector = counting  # type: ignore[attr-defined]
        try:
            state = await engine.run(prepared, {"steps": steps})
        finally:
            loop._selector = counting.inner  # type: ignore[attr-defined]
        cpu = _server_cpu(admin) - cpu
    admin.close()
    return state.seq + 1, counting.woken, cpu


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _server_ir(steps: int, base: Path | None) -> tuple[int, int]:
    """Instructions of a private redis-server under callgrind serving one loop run."""
    exe = shutil.which("redis-server")
    if exe is None or shutil.which("valgrind") is None:
        raise SystemExit("--callgrind needs redis-server and valgrind on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        port, out = _free_port(), Path(tmp) / "cg.out"
        server = subprocess.Popen(
            [
                *("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe),
                *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(port=port)
            for _ in range(600):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            env = dict(os.environ)
            if base is not None:
                link = Path(tmp) / "src"
                link.mkdir()
                (link / "phasegraph").symlink_to(base.resolve() / "engine")
                env["PYTHONPATH"] = str(link)
            url = f"redis://127.0.0.1:{port}/0"
            child = [sys.executable, __file__, "--redis", url, "--steps", str(steps)]
            report = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
            found = re.search(r"^(\d+) commits", report.stdout, re.MULTILINE)
            if found is None:
                raise SystemExit(f"the run reported no commits: {report.stdout!r}")
            commits = int(found.group(1))
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # the shutdown closed the connection
        finally:
            server.wait(timeout=120)
        match = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
        if match is None:
            raise SystemExit("no summary in callgrind's output")
        return int(match.group(1)), commits


def _per_commit(base: Path | None, steps: int) -> float:
    few_ir, few = _server_ir(steps // 4, base)
    many_ir, many = _server_ir(steps, base)
    return (many_ir - few_ir) / (many - few)


def _client_ir(base: Path | None, url: str) -> float:
    """Instructions per step of the client process on the store at ``url``."""
    counts = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "child.py"
        script.write_text(_CLIENT.format(loop=str(HERE / "loop.yaml")))
        env = with_checkout(dict(os.environ, PYTHONHASHSEED="0"), base, Path(tmp))
        # Once outside callgrind first: a tree's modules are compiled by their first import.
        subprocess.run([sys.executable, str(script), url, "2"], env=env, check=True)
        for steps in (SHORT, LONG):
            counts.append(instructions([str(script), url, str(steps)], env, Path(tmp)))
    return (counts[1] - counts[0]) / (LONG - SHORT)


def _client(base: Path | None, url: str) -> None:
    trees = {"after": None} if base is None else {"before": base, "after": None}
    for name, tree in trees.items():
        memory, on_redis = _client_ir(tree, "memory://"), _client_ir(tree, url)
        print(
            f"client {name:6} memory {memory:9,.0f} Ir/step   redis {on_redis:9,.0f} Ir/step"
            f"   redis/memory {on_redis / memory:.3f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--client", action="store_true")
    parser.add_argument("--base", type=Path, help="another checkout, measured as 'before'")
    args = parser.parse_args()
    if args.client:
        _client(args.base, args.redis)
        return
    if args.callgrind:
        after = _per_commit(None, args.steps)
        line = f"server {after:10,.0f} Ir per commit"
        if args.base is not None:
            before = _per_commit(args.base, args.steps)
            line += f"   before {before:10,.0f}   after/before {after / before:.3f}"
        print(line)
        return
    prefix = "pgcost" + uuid.uuid4().hex[:8]
    sep = "&" if "?" in args.redis else "?"
    client = redis.Redis.from_url(args.redis)
    try:
        commits, woken, cpu = asyncio.run(_run(f"{args.redis}{sep}prefix={prefix}", args.steps))
        stats = client.info("commandstats")
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 0.5 * cores:  # the server shares the CPUs: its µs grow with their load
        print(
            f"load average {load:.1f} on {cores} CPUs: not idle, the µs below are not "
            "comparable across runs (--callgrind counts instructions instead)"
        )
    calls = sum(int(row["calls"]) for row in stats.values())
    print(
        f"{commits} commits; per commit: {calls / commits:.2f} calls, "
        f"{woken / commits:.2f} wake-ups, {cpu / commits * 1e6:.2f} µs of the server's CPU "
        "(its main thread, user and system: reading, running and answering every call)"
    )
    for name, row in sorted(stats.items(), key=lambda item: -int(item[1]["usec"])):
        command = name.removeprefix("cmdstat_")
        print(
            f"  {command:<10} {int(row['calls']):7d} calls  {float(row['usec_per_call']):6.2f} "
            f"µs/call  {int(row['usec']) / commits:6.2f} µs per commit"
        )


if __name__ == "__main__":
    main()
