"""Benchmark: hostile cells against the sandbox, one fresh sandbox per case.

Each case runs a cell written to break out (the holes of issue 23 and the cases of tests/sandbox) in a branch of
a root state that holds a variable and a file, beside a sibling state that holds its own. It prints, per case:
the cell's status, seconds, whether the parent is still usable (same value, same file), whether the sibling is
unaffected, whether the host is unchanged (no secret leaked, no host file changed or read), how many
processes the case left behind once its branch was closed, and how many states it killed that came back by replay
(``states_rebuilt``: their values and files are intact, a cell running in them at that moment would have died).

Usage: ``python benchmarks/perf/sandbox_hostile.py --json`` prints one JSON object
(``{"cases": {name: {...}}, "contained": bool, ...}``). ``--only NAME`` runs some cases.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sandbox import Sandbox, SandboxConfig, WorkspaceError  # noqa: E402

SECRET = f"hostile-secret-{secrets.token_hex(6)}"
FILL = "with open({path!r}, 'wb') as f:\n    for _ in range({mib}):\n        f.write(bytes(2**20))\n"


@dataclass(frozen=True)
class Case:
    """A hostile cell; ``host_check`` says whether the host is unchanged after it (given the execution)."""

    name: str
    code: Callable[[Sandbox, dict], str]
    config: dict
    host_check: Callable[[Sandbox, object, dict], bool] = lambda box, ex, ctx: SECRET not in ex.observation(10**6)
    timeout: float = 20.0


def _marker_processes(marker: str) -> list[int]:
    """Processes (any user's) whose command line contains ``marker``."""
    return [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ())]


def _group_processes(box: Sandbox) -> int | None:
    """Processes in the sandbox's pids cgroup and its states' groups (None without a cgroup)."""
    group = box._cgroup
    if group is None:
        return None
    total = 0
    for procs in group.path.rglob("cgroup.procs"):
        try:
            total += len(procs.read_text().split())
        except OSError:
            continue
    return total


def _read_file_case(box: Sandbox, ex, ctx: dict) -> bool:
    try:
        data = ctx["state"].read_file("submission.csv")
    except (WorkspaceError, OSError):
        return True
    return SECRET.encode() not in data


def _file_unchanged(path_key: str) -> Callable[[Sandbox, object, dict], bool]:
    def check(box: Sandbox, ex, ctx: dict) -> bool:
        path = ctx[path_key]
        return path.read_text() == ctx[path_key + "_text"]
    return check


def cases(secret_file: Path, host_file: Path) -> list[Case]:
    faults = "/tmp/jupiter-sandbox/faults"
    return [
        Case("infinite_loop", lambda b, c: "while True:\n    pass", {}, timeout=2),
        Case("segfault", lambda b, c: "import ctypes\nctypes.string_at(0)", {}),
        Case("alarm_signal", lambda b, c: "import signal, time\nsignal.alarm(1)\ntime.sleep(5)", {}),
        Case("fork_bomb", lambda b, c: "import os\nwhile True:\n    os.fork()", {"max_processes": 64}, timeout=5),
        Case("memory_hog", lambda b, c: "a = []\nwhile True:\n    a.append(' ' * 10**7)", {"memory_limit_mb": 1024},
             timeout=60),
        Case("kill_all", lambda b, c: "import os, signal\nos.kill(-1, signal.SIGKILL)", {}),
        Case("fault_report_symlink", lambda b, c: (
            "import os\ntry:\n"
            f"    r = os.path.join({faults!r}, f'{{os.getpid()}}.txt')\n"
            "    if os.path.lexists(r):\n        os.remove(r)\n"
            f"    os.symlink({str(secret_file)!r}, r)\nfinally:\n    os._exit(1)\n"), {}),
        Case("read_file_symlink", lambda b, c: f"import os\nos.symlink({str(secret_file)!r}, 'submission.csv')", {},
             host_check=_read_file_case),
        Case("host_environment", lambda b, c: "import os\nprint(dict(os.environ))", {}),
        Case("other_states_files", lambda b, c: (
            "import os\nbase = os.path.dirname(os.getcwd())\nnames = ['s000001', 's000002']\n"
            "try:\n    names += os.listdir(base)\nexcept OSError:\n    pass\n"
            "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "    try:\n        names.append(os.readlink(f'/proc/{pid}/cwd'))\n    except OSError:\n        pass\n"
            "for name in set(names) - {os.getcwd(), os.path.basename(os.getcwd())}:\n"
            "    try:\n        open(os.path.join(base, name, 'mine.txt'), 'w').write('corrupt')\n"
            "    except OSError:\n        pass\n"
            "open('/tmp/mine.txt', 'w').write('corrupt')\n"), {}),
        Case("shm_fill", lambda b, c: FILL.format(path="/dev/shm/fill", mib=800),
             {"state_memory_mb": 512, "shm_size_mb": 1024}, timeout=60),
        Case("disk_fill", lambda b, c: "".join(FILL.format(path=f"f{i}.bin", mib=100) for i in range(11)),
             {"disk_quota_mb": 512}, timeout=120),
        Case("setsid_child", lambda b, c: (
            f"import subprocess\nsubprocess.Popen(['sleep', '{c['marker']}'], start_new_session=True)\n"
            "while True:\n    pass"), {}, timeout=2),
        Case("host_file_read", lambda b, c: f"print(open({str(host_file)!r}).read())", {}),
        Case("write_outside", lambda b, c: (
            f"open({str(host_file)!r}, 'w').write('{SECRET}')\n"), {}, host_check=_file_unchanged("host_file")),
        Case("network", lambda b, c: "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)", {}),
        Case("cpu_pool", lambda b, c: (
            "import multiprocessing as mp, time\n"
            "def spin(_):\n    end = time.time() + 2\n    while time.time() < end:\n        pass\n"
            "with mp.Pool(16) as pool:\n    pool.map(spin, range(16))\n"), {}, timeout=60),
    ]


def run_case(case: Case, ctx_base: dict) -> dict:
    marker = f"{300 + len(case.name)}.{secrets.randbelow(10**6)}"
    os.environ["HOSTILE_API_KEY"] = SECRET
    config = SandboxConfig(preload_modules=(), timeout_s=60, **case.config)
    with Sandbox(config) as box:
        root = box.open_root()
        root.run("x = 41\nopen('mine.txt', 'w').write('root')")
        sibling = root.branch()
        sibling.run("y = 1\nopen('mine.txt', 'w').write('sibling')")
        before = _group_processes(box)
        hostile = root.branch()
        ctx = dict(ctx_base, state=hostile, marker=marker)
        started = time.perf_counter()
        ex = hostile.run(case.code(box, ctx), timeout=case.timeout)
        seconds = time.perf_counter() - started
        host_ok = case.host_check(box, ex, ctx)
        hostile.close()
        time.sleep(0.2)
        after = _group_processes(box)
        left = len(_marker_processes(marker)) + (max(0, after - before) if None not in (before, after) else 0)
        parent_ok = root.run("x + 1").result == "42" and root.read_file("mine.txt") == b"root"
        sibling_ok = sibling.run("x + y").result == "42" and sibling.read_file("mine.txt") == b"sibling"
        usable = box.open_root().run("2 + 2").result == "4"
        for pid in _marker_processes(marker):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        revivals = box.stats().revivals  # states whose process the case killed, rebuilt by replay
        return {"status": ex.status.value, "seconds": round(seconds, 3), "parent_usable": bool(parent_ok and usable),
                "states_rebuilt": revivals,
                "sibling_unaffected": bool(sibling_ok), "host_unchanged": bool(host_ok), "processes_left": left,
                "contained": bool(parent_ok and usable and sibling_ok and host_ok and left == 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        secret_file = Path(tmp) / "shadow"
        secret_file.write_text(f"root:{SECRET}:19000::::::\n")
        os.chmod(secret_file, 0o600)
        host_file = REPO.parent / f".jupiter-hostile-{secrets.token_hex(4)}.csv"  # beside the checkout
        host_file.write_text("label\n1\n")
        os.chmod(host_file, 0o644)
        ctx = {"host_file": host_file, "host_file_text": host_file.read_text()}
        results = {}
        try:
            for case in cases(secret_file, host_file):
                if args.only and case.name not in args.only:
                    continue
                results[case.name] = run_case(case, ctx)
        finally:
            host_file.unlink()
    with Sandbox(SandboxConfig(preload_modules=())) as probe:
        guarantees = sorted(g.name for g in probe.guarantees)
        isolated = probe.isolation.bwrap
    report = {"cases": results, "contained": all(r["contained"] for r in results.values()),
              "isolated": isolated, "guarantees": guarantees}
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        for name, row in results.items():
            print(f"{name:22s} {row}")
        print("contained:", report["contained"])


if __name__ == "__main__":
    main()
