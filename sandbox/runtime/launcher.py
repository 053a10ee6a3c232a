"""Start a sandbox runtime without forking the host: a small shell does in the child what must happen before exec.

Why not ``subprocess.Popen(preexec_fn=...)``: a ``preexec_fn`` makes CPython ``fork()`` the whole host instead of
``vfork()``-ing it, and the fork copies the host's page tables while the host holds the GIL. The spawn call took
30-34 ms for a 122 MB host and 112-122 ms for a 1.3 GB one (a model in-process), and the host's other threads
stalled for up to 20 and 59 ms: every tree a service starts held up its event loop
(``benchmarks/perf/sandbox_start.py`` measures it; docs/sandbox.md has the numbers). CPython's documentation also warns
that a ``preexec_fn`` can deadlock in a host with threads, and a service is nothing but threads.

What the ``preexec_fn`` did, and where it happens now:
- join the sandbox's pids cgroup before anything is started: the shell writes its own pid into
  ``cgroup.procs`` and then ``exec``s, so the runtime and everything it forks are counted there from the start;
- run at the sandbox's niceness, as a process and as a session (``limits.lower_priority`` says why both): the
  shell sets its session's autogroup and ``exec``s through ``nice``; the runtime then applies the niceness to
  itself again, as before;
- die with the host (``PR_SET_PDEATHSIG``): ``bwrap --die-with-parent`` where bubblewrap is used, and the runtime
  itself (``_server.py``) otherwise, which also checks that its parent is still the host that started it.

The shell and ``nice`` run in the child, after the cheap ``vfork``; they cost the host nothing.
"""
from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

__all__ = ["launch_argv"]

# $1: cgroup.procs files to join, ':'-separated ("" for none); $2: niceness to add ("0" for none) with $3, the
# path of nice(1); $4: the
# session's autogroup niceness ("0" to leave it); the rest: the command. Failing to join the cgroup or to set the
# autogroup is not fatal, as with the preexec_fn before (the cgroup is checked afterwards by ``PidsCgroup.holds``).
_SCRIPT = (
    'procs=$1 add=$2 nice_bin=$3 group=$4; shift 4; '
    'if [ -n "$procs" ]; then IFS=:; for f in $procs; do { echo $$ > "$f"; } 2>/dev/null; done; unset IFS; fi; '
    'if [ "$group" -gt 0 ]; then { echo "$group" > /proc/self/autogroup; } 2>/dev/null; fi; '
    'if [ "$add" -gt 0 ]; then exec "$nice_bin" -n "$add" "$@"; fi; '
    'exec "$@"'
)


def launch_argv(command: Sequence[str], *, procs_file: Path | Sequence[Path] | None = None,
                nice: int = 0) -> list[str]:
    """The argv that runs ``command`` in the cgroup(s) of ``procs_file`` (one ``cgroup.procs`` per hierarchy: pids,
    memory, cpu) at niceness ``nice`` at least.

    The niceness is raised to ``nice`` (never lowered): the increment is taken against the calling thread's
    niceness now, which the child starts with. The autogroup is only set for ``nice`` > 0; the caller must start
    the child in a session of its own (``start_new_session=True``), so that it changes nobody else's share.
    """
    add = max(0, nice - os.nice(0)) if nice > 0 else 0
    nice_bin = _nice_binary() if add else None
    if add and nice_bin is None:
        add = 0  # no nice(1) here: the runtime lowers its own priority first thing (``_server._start``)
    files = [procs_file] if isinstance(procs_file, (str, Path)) else list(procs_file or ())
    return ["/bin/sh", "-c", _SCRIPT, "jupiter-sandbox-launch", ":".join(map(str, files)), str(add), nice_bin or "",
            str(nice if nice > 0 else 0), *command]


@functools.lru_cache(maxsize=1)
def _nice_binary() -> str | None:
    return shutil.which("nice")
