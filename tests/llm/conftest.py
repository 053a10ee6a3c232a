"""Fixtures of the policy tests: the scripted OpenAI-shaped server and the real vLLM server."""

import sys
from pathlib import Path

import pytest

try:
    from tests.llm.servers import scripted_openai, vllm_server  # noqa: F401  (fixtures)
except ImportError:  # pytest started without the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.llm.servers import scripted_openai, vllm_server  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: real model servers and models; excluded from the default run")
