"""The jupyter_client backend: any installed Jupyter kernel, one kernel per live state.

Kernels cannot fork, so ``branch()`` starts a kernel in a fresh workspace and replays the recorded cells (the
paper's method). It is the reference the fork backend is tested against, and the way to run non-Python
kernels. Outputs are matched to their cell by the parent message id; a cell is finished when both its
``execute_reply`` and the ``idle`` status arrived. The config's rlimits are applied to each kernel process (set
between fork and exec, so any kernel language gets them); there is no bubblewrap on this backend.
"""
from __future__ import annotations

import functools
import logging
import queue
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.config import SandboxConfig
from sandbox.runtime.base import RawResult, RuntimeDied, RuntimeTimeout, StartupError, runtime_env, uss_bytes
from sandbox.runtime.limits import apply_limits
from sandbox.runtime.workspace import Layout

__all__ = ["KernelFactory", "KernelRuntime"]

log = logging.getLogger(__name__)


class KernelFactory:
    """Starts kernels of one kind; checks at construction that the kernel exists."""

    def __init__(self, config: SandboxConfig, layout: Layout) -> None:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        self.config = config
        self.layout = layout
        try:
            KernelSpecManager().get_kernel_spec(config.kernel_name)
        except NoSuchKernel as exc:
            raise StartupError(f"no Jupyter kernel named {config.kernel_name!r} is installed "
                               f"(SandboxConfig.kernel_name; for python3: pip install ipykernel)") from exc

    def start(self, workspace: Path, generation: int) -> KernelRuntime:
        runtime = KernelRuntime(self.config, self.layout, workspace, generation)
        try:
            raw = runtime.run("1+1", self.config.startup_timeout_s, store_history=False)
        except (RuntimeDied, RuntimeTimeout) as exc:
            runtime.close()
            raise StartupError(f"kernel {self.config.kernel_name!r} failed its 1+1 self-check: {exc}") from exc
        if self.config.kernel_name == "python3":
            result = next((o for o in raw.outputs if o["output_type"] == "execute_result"), None)
            if result is None or result["data"].get("text/plain") != "2":
                runtime.close()
                raise StartupError(f"kernel self-check `1+1` did not give 2: {raw.outputs}")
        return runtime


class KernelRuntime:
    """One kernel process holding one notebook state."""

    can_fork = False
    watches_disk = False  # its files are measured after each cell (``run`` ignores ``over_quota``)

    def __init__(self, config: SandboxConfig, layout: Layout, workspace: Path, generation: int) -> None:
        from jupyter_client.manager import KernelManager

        self.config = config
        self.generation = generation
        self.closed = False
        self._km = KernelManager(kernel_name=config.kernel_name)
        env = runtime_env(layout, extra=config.env)
        env.pop("JPY_PARENT_PID", None)
        try:
            self._km.start_kernel(cwd=str(workspace), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  extra_arguments=["--HistoryManager.enabled=False"],
                                  preexec_fn=functools.partial(apply_limits, config.rlimits(), config.nice))
            self._kc = self._km.blocking_client()
            self._kc.start_channels()
            self._kc.wait_for_ready(timeout=config.startup_timeout_s)
        except Exception as exc:  # any start failure is reported with the kernel's name
            self._shutdown()
            raise StartupError(f"kernel {config.kernel_name!r} failed to start: {exc}") from exc
        provisioner = getattr(self._km, "provisioner", None)
        self.pid = getattr(getattr(provisioner, "process", None), "pid", None)

    @property
    def alive(self) -> bool:
        return not self.closed and self._km.is_alive()

    def run(self, code: str, timeout_s: float, over_quota: Callable[[], str | None] | None = None,
            check_every_s: float = 0.5, store_history: bool = True) -> RawResult:
        if self.closed:
            raise RuntimeDied("kernel already closed")
        deadline = time.monotonic() + timeout_s
        started = time.monotonic()
        msg_id = self._kc.execute(code, store_history=store_history, allow_stdin=False, stop_on_error=False)
        outputs: list[dict[str, Any]] = []
        size = 0
        dropped = 0
        reply: dict[str, Any] | None = None
        idle = False
        cap = self.config.max_output_chars
        while reply is None or not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RuntimeTimeout(f"cell exceeded its {timeout_s:g} s time limit and was stopped")
            if not self._km.is_alive():
                self.kill()
                raise RuntimeDied("the kernel died while running the cell")
            if reply is None:
                try:
                    msg = self._kc.get_shell_msg(timeout=min(remaining, 0.05))
                    if msg["parent_header"].get("msg_id") == msg_id:
                        reply = msg["content"]
                except queue.Empty:
                    pass
            try:
                msg = self._kc.get_iopub_msg(timeout=min(max(deadline - time.monotonic(), 0.001), 0.05))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            content = msg["content"]
            if kind == "status":
                idle = content["execution_state"] == "idle"
            elif kind == "stream":
                text = content["text"]
                room = max(0, cap - size)
                if len(text) > room:
                    dropped += len(text) - room
                    text = text[:room]
                size += len(text)
                if text:
                    if outputs and outputs[-1]["output_type"] == "stream" and outputs[-1]["name"] == content["name"]:
                        outputs[-1]["text"] += text
                    else:
                        outputs.append({"output_type": "stream", "name": content["name"], "text": text})
            elif kind in ("execute_result", "display_data"):
                n = sum(len(v) if isinstance(v, str) else len(str(v)) for v in content["data"].values())
                if size + n > cap:
                    dropped += n
                    continue
                size += n
                out = {"output_type": kind, "data": content["data"], "metadata": content.get("metadata", {})}
                if kind == "execute_result":
                    out["execution_count"] = content.get("execution_count")
                outputs.append(out)
            elif kind == "error":
                outputs.append({"output_type": "error", "ename": content["ename"], "evalue": content["evalue"],
                                "traceback": content["traceback"]})
            elif kind == "clear_output":
                outputs = []
        return RawResult(outputs=outputs, success=reply.get("status") == "ok",
                         execution_count=reply.get("execution_count"), duration_s=time.monotonic() - started,
                         dropped_chars=dropped)

    def fork(self, workspace: Path, generation: int, timeout_s: float) -> None:
        return None

    def memory_bytes(self) -> int:
        return 0 if self.pid is None else uss_bytes(self.pid)

    def _shutdown(self) -> None:
        try:
            if getattr(self, "_kc", None) is not None:
                self._kc.stop_channels()
        finally:
            if self._km.has_kernel:
                self._km.shutdown_kernel(now=True)
            self._km.cleanup_resources()

    def kill(self) -> None:
        if not self.closed:
            self.closed = True
            self._shutdown()

    def close(self) -> None:
        self.kill()


