"""Notebook-state runtimes for tree search: run cells, branch states in O(1) (fork), keep files per state,
enforce limits and isolation, export paths as notebooks. See docs/sandbox.md."""
from sandbox.config import Backend, ConfigError, Isolation, SandboxConfig
from sandbox.execution import ExecError, ExecStatus, Execution
from sandbox.runtime import StartupError
from sandbox.sandbox import (Guarantee, ProcessBudgetError, Sandbox, SandboxClosedError, SandboxStats,
                             StateLostError)
from sandbox.state import State, StateClosedError
from sandbox.workspace import WorkspaceError

__all__ = [
    "Backend", "ConfigError", "ExecError", "ExecStatus", "Execution", "Guarantee", "Isolation", "ProcessBudgetError",
    "Sandbox", "SandboxClosedError", "SandboxConfig", "SandboxStats", "StartupError", "State", "StateClosedError",
    "StateLostError", "WorkspaceError",
]
