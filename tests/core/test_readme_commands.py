"""The README's two set-up commands are the ones CI runs, and the first names files that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```\n(.*?)```", text, re.S)
    assert block is not None and text.index(block.group(0)) < 200, "the README opens with its commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands_that_work_from_a_plain_shell() -> None:
    install, tests = _setup_commands()
    assert install.startswith("bash scripts/install.sh && .venv/bin/jupiter solve ")
    assert (ROOT / "scripts" / "install.sh").is_file()
    task = shlex.split(install)[5]
    assert (ROOT / task).is_file(), task
    assert tests == "bash scripts/test.sh"
    assert (ROOT / "scripts" / "test.sh").is_file()


def test_ci_runs_the_readme_install_and_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    _, tests = _setup_commands()
    assert "bash scripts/install.sh" in ci
    assert tests in ci
    assert ci.index(tests) > ci.index("bash scripts/install.sh")
