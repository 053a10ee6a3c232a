"""Fixtures of the server tests: ``start_server(*flags, token=None, db=None, data_root=None, port=0)`` starts a
real ``jupiter serve`` on a free (or the given) 127.0.0.1 port, stopped by PID when the test or module ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from serve_helpers import Server


def _factory(root: Path, servers: list[Server]) -> Callable[..., Server]:
    def start(*flags: str, token: str | None = None, db: Path | None = None, data_root: Path | None = None,
              port: int = 0, name: str = "server") -> Server:
        folder = root / f"{name}-{len(servers)}"
        folder.mkdir(parents=True, exist_ok=True)
        server = Server(list(flags), db=db or folder / "jobs.sqlite", data_root=data_root or folder / "jobs",
                        log_path=folder / "server.log", token=token, port=port)
        servers.append(server)
        return server.start()

    return start


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []
    yield _factory(tmp_path, servers)
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def start_module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []
    yield _factory(tmp_path_factory.mktemp("serve"), servers)
    for server in servers:
        server.stop()
