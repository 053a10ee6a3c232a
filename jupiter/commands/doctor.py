"""``jupiter doctor``: does the sandbox's isolation work on this machine, which guarantees hold, what is missing.

Why a command: the sandbox degrades rather than refuses (no bubblewrap: rlimits only; no cgroups: no per-state
memory limit), and a search that runs degraded looks like one that runs isolated. This starts a real sandbox,
runs a cell in a root state and in a branch, and lists the guarantees of the threat table (docs/sandbox.md)
that hold and those that do not, with what the machine lacks and how to get it. Exit code 0 when cells run (even
degraded), 1 when the sandbox cannot start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupiter.commands.helpformat import HelpFormatter


@dataclass(frozen=True)
class Check:
    """One thing the isolation needs: whether this machine has it, what was seen, and how to get it."""

    name: str
    ok: bool
    seen: str
    fix: str = ""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("doctor", help="check the sandbox's isolation on this machine",
                                   description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    parser.set_defaults(handler=run)


def host_checks() -> list[Check]:
    """What the machine offers the sandbox, looked at without starting one."""
    from sandbox.runtime.isolation import LANDLOCK_SIGNAL_ABI, bwrap_works, landlock_abi

    bwrap = shutil.which("bwrap")
    namespaces = _read("/proc/sys/user/max_user_namespaces")
    restricted = _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    abi = landlock_abi()
    works = bwrap is not None and bwrap_works()
    checks = [
        Check("bubblewrap installed", bwrap is not None, bwrap or "bwrap not on PATH",
              "apt-get install -y bubblewrap (Debian/Ubuntu), dnf install bubblewrap (Fedora)"),
        Check("bubblewrap can build the sandbox's namespaces", works,
              "yes" if works else ("not tried: not installed" if bwrap is None else "bwrap failed to start"),
              "" if works or bwrap is None else _namespace_fix(namespaces, restricted)),
        Check("user namespaces", namespaces not in (None, "0"), f"user.max_user_namespaces = {namespaces}",
              "sysctl -w user.max_user_namespaces=15000"),
        Check("Landlock signal scoping (Linux 6.12+)", abi >= LANDLOCK_SIGNAL_ABI, f"Landlock ABI {abi}",
              "a kernel of 6.12 or later with Landlock in its LSM list (lsm=...,landlock)"),
        Check("running as root (cells then run as an unprivileged uid)", os.geteuid() == 0, f"uid {os.geteuid()}",
              "without root, cells keep your uid: run as root, or in a container where you are root"),
    ]
    return checks


def _namespace_fix(namespaces: str | None, restricted: str | None) -> str:
    if restricted == "1":
        return ("AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): "
                "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for bwrap")
    if namespaces == "0":
        return "sysctl -w user.max_user_namespaces=15000"
    return "run `bwrap --ro-bind / / --unshare-net --unshare-pid true` to see bubblewrap's own error"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def sandbox_report() -> dict[str, Any]:
    """Start a real sandbox, run a cell in a root state and in a branch, and say what holds."""
    from sandbox import ExecStatus, Guarantee, Sandbox, SandboxConfig

    started = time.perf_counter()
    try:
        with Sandbox(SandboxConfig(timeout_s=60)) as box:
            root = box.open_root()
            first = root.run("import sys; print(sys.version.split()[0])")
            branch = root.branch().run("print(6 * 7)")
            ran = first.status is ExecStatus.OK and branch.observation().strip() == "42"
            return {
                "runs_cells": ran,
                "isolation": box.isolation.describe(),
                "cgroups": box.cgroups(),
                "held": [g.name for g in Guarantee if g in box.guarantees],
                "missing": [g.name for g in box.missing_guarantees()],
                "why_missing": box.why_not() if box.missing_guarantees() else "",
                "descriptions": {g.name: g.value for g in Guarantee},
                "seconds": round(time.perf_counter() - started, 2),
                "error": None if ran else first.observation()[-500:],
            }
    except Exception as exc:  # the report is the point: say what failed, whatever it was
        return {"runs_cells": False, "error": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - started, 2)}


def run(args: argparse.Namespace) -> int:
    checks = host_checks()
    report = sandbox_report()
    if args.json:
        print(json.dumps({"checks": [asdict(c) for c in checks], "sandbox": report}))
        return 0 if report["runs_cells"] else 1
    out = sys.stdout
    print("jupiter doctor: the sandbox on this machine", file=out)
    for check in checks:
        print(f"  [{'ok' if check.ok else '--'}] {check.name}: {check.seen}", file=out)
        if not check.ok and check.fix:
            print(f"       fix: {check.fix}", file=out)
    if not report["runs_cells"]:
        print(f"\nthe sandbox cannot run cells here: {report['error']}", file=out)
        return 1
    print(f"\ncells run ({report['seconds']} s to start a sandbox, run a cell and a branch)", file=out)
    print(f"isolation: {report['isolation']}", file=out)
    cgroups = report["cgroups"]
    print("cgroups: " + ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in cgroups.items()), file=out)
    print(f"guarantees that hold ({len(report['held'])} of {len(report['descriptions'])}):", file=out)
    for name in report["held"]:
        print(f"  + {report['descriptions'][name]}", file=out)
    if report["missing"]:
        print(f"guarantees that do NOT hold ({report['why_missing']}):", file=out)
        for name in report["missing"]:
            print(f"  - {report['descriptions'][name]}", file=out)
    return 0
