"""Where a server's trees run, chosen once from its settings: a driver process, this process, or Ray.

Why here: ``jupiter serve`` (which must fail before it listens) and the app's lifespan (for an app built
without a backend) made the same three-way choice; both now call ``start_backend``.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupiter.llm import Policy, load_policy
from jupiter.serve.config import ServeConfig
from jupiter.serve.driver_process import DriverProcess
from search.loaders import load_value
from search.protocols import Value

__all__ = ["SearchBackend", "start_backend"]


@dataclass
class SearchBackend:
    """What the server's scheduler runs on: a started ``driver`` process (which loads the policy itself), or a
    ``policy`` (and ``value``) loaded in this process; all None in Ray mode, where the workers load them."""

    policy: Policy | None = None
    value: Value | None = None
    driver: DriverProcess | None = None


def start_backend(config: ServeConfig) -> SearchBackend:
    """Start the driver process or load the policy and value model here, as ``config`` says.

    Raises ``DriverStartError`` (the driver process could not load its policy or value model), ``PolicyError``
    (``--llm``) or ``search.loaders.LoadError`` (``--value-model``).
    """
    if config.ray_address is not None:
        return SearchBackend()
    if config.driver == "process":
        return SearchBackend(driver=DriverProcess(config).start())
    policy = load_policy(config.llm)
    try:
        return SearchBackend(policy=policy, value=load_value(config.value_model))
    except BaseException:
        policy.close()
        raise
