"""Notebook-state runtimes for tree search: run cells, branch states in O(1) (fork), keep files per state,
enforce limits and isolation, export paths as notebooks. See docs/sandbox.md.

The API is this folder (``Sandbox``, ``State``, ``Execution``, ``SandboxConfig``, ``notebook.to_notebook``); the
processes, limits and isolation under it are ``sandbox.runtime`` (its docstring lists its modules)."""
from sandbox.config import Backend, ConfigError, Isolation, SandboxConfig
from sandbox.execution import ExecError, ExecStatus, Execution
from sandbox.runtime.base import StartupError
from sandbox.runtime.budget import MemoryBudget, process_budget, set_process_budget
from sandbox.runtime.workspace import WorkspaceError
from sandbox.sandbox import Guarantee, ProcessBudgetError, Sandbox, SandboxClosedError, SandboxStats, StateLostError
from sandbox.state import State, StateClosedError

__all__ = [
    "Backend", "ConfigError", "ExecError", "ExecStatus", "Execution", "Guarantee", "Isolation", "MemoryBudget",
    "ProcessBudgetError", "Sandbox", "SandboxClosedError", "SandboxConfig", "SandboxStats", "StartupError", "State",
    "StateClosedError", "StateLostError", "WorkspaceError", "process_budget", "set_process_budget",
]
