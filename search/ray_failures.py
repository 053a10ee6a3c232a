"""Map what Ray raises when a worker stops into a ``DeathCause`` for the manifest.

Why: users of Ray saw actors vanish with long, generic messages and could not tell an out-of-memory kill from
a bug. Ray says what it knows in the exception type and message; this module reads both in one place so the
manifest carries a short, stable cause plus the first lines of Ray's own text.
"""

from __future__ import annotations

from search.ray_manifest import DeathCause

__all__ = ["classify_failure", "short_error"]

_OOM_MARKERS = ("memory pressure", "out of memory", "outofmemory", "oom killed", "killed due to memory")
_KILL_MARKERS = ("ray.kill", "sigkill", "killed", "connection error code", "unexpectedly exits", "exit code")
_NODE_MARKERS = ("node died", "node is dead", "raylet died", "preempted", "node failure")


def short_error(text: str, limit: int = 400) -> str:
    """The first ``limit`` characters of ``text`` on one line (Ray's messages span many lines)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def classify_failure(exc: BaseException) -> tuple[DeathCause, str]:
    """(cause, short detail) for an exception from ``ray.get`` on a worker's stream.

    Order matters: Ray's message for a SIGKILLed worker *mentions* the OOM killer as a possible cause, so an
    explicit out-of-memory type or marker is checked first and "killed" only after it.
    """
    try:
        import ray.exceptions as rex
    except ImportError:  # classification without Ray (unit tests of the mapping)
        rex = None  # type: ignore[assignment]
    text = str(exc)
    lowered = text.lower()
    if rex is not None:
        if isinstance(exc, getattr(rex, "OutOfMemoryError", ())):
            return DeathCause.OUT_OF_MEMORY, short_error(text)
        if isinstance(exc, getattr(rex, "NodeDiedError", ())):
            return DeathCause.NODE_DIED, short_error(text)
        if isinstance(exc, rex.RayActorError):
            if getattr(exc, "preempted", False):
                return DeathCause.NODE_DIED, short_error(text)
            if "worker exit type: system_error" in lowered and "connection error code" in lowered:
                # Ray cannot tell a SIGKILL from the kernel OOM killer here; its text lists both.
                return DeathCause.KILLED, short_error("killed by a signal (SIGKILL or the kernel OOM killer): " + text)
            return _by_text(lowered, text, default=DeathCause.KILLED)
        if isinstance(exc, rex.RayTaskError):
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            return DeathCause.ERROR, short_error(f"{type(cause).__name__}: {cause}")
    return _by_text(lowered, f"{type(exc).__name__}: {text}", default=DeathCause.ERROR)


def _by_text(lowered: str, text: str, default: DeathCause) -> tuple[DeathCause, str]:
    if any(marker in lowered for marker in _OOM_MARKERS) and "some common causes include" not in lowered:
        return DeathCause.OUT_OF_MEMORY, short_error(text)
    if any(marker in lowered for marker in _NODE_MARKERS):
        return DeathCause.NODE_DIED, short_error(text)
    if any(marker in lowered for marker in _KILL_MARKERS):
        return DeathCause.KILLED, short_error(text)
    return default, short_error(text)
