"""Putting a runtime's resource limits on the current process.

One place for both backends: the fork runtime (``_server.py``, which loads this file by path because it must not
import the package) applies them at start, the kernel backend between fork and exec of each kernel. Standard
library only.
"""
import resource
import signal

#: ``SandboxConfig.rlimits()`` names -> the ``setrlimit`` resources.
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "cpu": resource.RLIMIT_CPU,
}


def apply_limits(rlimits):
    """Set each named limit (None: unlimited) and ignore SIGXFSZ, so that a too-large file is an OSError in the
    cell rather than the death of the process. Both survive exec."""
    for name, value in rlimits.items():
        if value is not None:
            resource.setrlimit(RLIMITS[name], (int(value), int(value)))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
