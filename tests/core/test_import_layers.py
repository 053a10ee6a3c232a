"""The package layers hold: no module imports from a layer above its own (the contracts in ``.importlinter``; also:
the sandbox's plumbing, ``sandbox.runtime``, imports none of its API, and other packages use that API only).

Runs import-linter over the checkout, lazy imports inside functions included, so the default suite (and so CI)
fails on an upward import; and checks that every module of ``jupiter/`` is placed in a layer, so a new module
cannot stand outside the contract.
"""

from __future__ import annotations

import configparser
import pkgutil
import re
import subprocess
import sys

import pytest

import jupiter
from tests.conftest import REPO

CONFIG = REPO / ".importlinter"


def _layer_modules() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(CONFIG, encoding="utf-8")
    layers = parser["importlinter:contract:layers"]["layers"]
    return {name for name in re.split(r"[\s:|]+", layers) if name}


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    # in a process of its own: import-linter reconfigures logging in the process that runs it
    pytest.importorskip("importlinter")
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           f"sys.exit(lint_imports(config_filename={str(CONFIG)!r}, no_cache=True, no_logo=True))"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "3 kept, 0 broken" in done.stdout


def test_every_jupiter_module_has_a_layer() -> None:
    modules = {f"jupiter.{m.name}" for m in pkgutil.iter_modules(jupiter.__path__)}
    placed = {name for name in _layer_modules() if name.startswith("jupiter.")}
    assert modules - placed == set(), "place these jupiter modules in a layer of .importlinter"
