"""Every value model the repository holds (the learning curve's under data/value_model/curve, the one that ships
as ``--value-model default``) holds its weights, tracked by git: a folder with only its config and metrics is a
model nobody can load, which a .gitignore rule once made of two of them without a word."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

FOLDERS = sorted(p.parent for pattern in ("data/value_model/curve/*/value_config.json",
                                          "jupiter/value_models/*/value_config.json") for p in REPO.glob(pattern))
WEIGHTS = ("adapter/adapter_model.safetensors", "adapter/adapter_config.json", "value_head.safetensors")


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(REPO)) for f in FOLDERS])
def test_a_value_model_in_the_repository_holds_its_weights(folder: Path) -> None:
    missing = [name for name in WEIGHTS if not (folder / name).is_file()]
    assert not missing, f"{folder}: {missing} missing"
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return
    names = [str((folder / name).relative_to(REPO)) for name in WEIGHTS]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=REPO, capture_output=True, text=True)
    assert ignored.stdout.strip() == "", f"ignored by git, so never committed: {ignored.stdout.split()}"


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(REPO)) for f in FOLDERS])
def test_a_value_model_in_the_repository_names_its_backbone_not_a_folder_of_the_machine_that_trained_it(
        folder: Path) -> None:
    import json

    backbone = json.loads((folder / "value_config.json").read_text())["backbone"]
    base = json.loads((folder / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert not Path(backbone).is_absolute() and base == backbone, (backbone, base)
