"""Cells get a minimal environment: the host's secrets (API keys live in its environment) never reach them."""
from __future__ import annotations

import pytest

from sandbox import ConfigError, Sandbox, SandboxConfig

KEY = "sk-jupiter-test-not-a-real-key"


@pytest.mark.parametrize("backend", ["fork", "kernel"])
def test_host_environment_does_not_reach_cells(monkeypatch, backend):
    monkeypatch.setenv("MY_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    config = SandboxConfig(backend=backend, preload_modules=(), env={"WANTED_SETTING": "on"})
    with Sandbox(config) as box:
        state = box.open_root()
        ex = state.run("import os, subprocess\n"
                       "print(sorted(os.environ))\n"
                       "print(subprocess.run(['env'], capture_output=True, text=True).stdout)")
        seen = ex.observation(100_000)
        assert KEY not in seen and "MY_API_KEY" not in seen and "OPENAI_API_KEY" not in seen
        assert state.run("os.environ.get('WANTED_SETTING')").result == "'on'"
        assert state.run("os.environ['OMP_NUM_THREADS'], 'PATH' in os.environ").result == "('1', True)"


def test_env_setting_is_validated():
    with pytest.raises(ConfigError, match="SandboxConfig.env"):
        SandboxConfig(env={"BAD=NAME": "x"})
    with pytest.raises(ConfigError, match="SandboxConfig.env"):
        SandboxConfig(env={"OK": 3})
    assert SandboxConfig(env={"A": "1"}).env == (("A", "1"),)
