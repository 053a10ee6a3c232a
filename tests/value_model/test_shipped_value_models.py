"""Every value model the repository holds (the learning curve's under data/value_model/curve, the one that ships
as ``--value-model default``) holds its weights, tracked by git: a folder with only its config and metrics is a
model nobody can load, which a .gitignore rule once made of two of them without a word. The rankings shipped beside
the curve's models are what their saved node estimates give."""

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


DEFAULT = REPO / "jupiter" / "value_models" / "default"


def test_the_shipped_default_value_model_is_the_one_its_readme_names_by_hash() -> None:
    """The README beside the shipped model gives the sha256 of each weight file: the model in the package is the
    one the documented command made, byte for byte."""
    import hashlib
    import re

    readme = (DEFAULT / "README.md").read_text(encoding="utf-8")
    for name in ("adapter/adapter_model.safetensors", "value_head.safetensors"):
        digest = hashlib.sha256((DEFAULT / name).read_bytes()).hexdigest()
        listed = re.search(rf"`{re.escape(name)}`[^\n]*?([0-9a-f]{{64}})", readme)
        assert listed, f"{name}: no sha256 in {DEFAULT / 'README.md'}"
        assert listed.group(1) == digest, name


def test_value_model_default_loads_the_shipped_model_and_scores_real_states(backbone: str) -> None:
    """``--value-model default`` is the folder in the package, loaded onto the embedded backbone as ``--llm
    default`` is; it gives each state a finite value in [-1, 1], and different states different values."""
    import gzip
    import json
    import math

    from search.loaders import load_value

    with gzip.open(REPO / "data" / "value_model" / "vm5-part1" / "samples.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    scorer = load_value("default", device="cpu")
    values = scorer.evaluate([row["messages"] for row in rows])
    assert len(values) == 3 and all(math.isfinite(v) and -1.0 <= v <= 1.0 for v in values)
    assert len({round(v, 6) for v in values}) > 1


NODE_FILES = sorted(REPO.glob("data/value_model/curve/*/nodes-dev-trees*.jsonl.gz"))


@pytest.mark.parametrize("nodes_file", NODE_FILES, ids=[str(f.relative_to(REPO)) for f in NODE_FILES])
def test_a_shipped_ranking_is_what_its_saved_node_estimates_give(nodes_file: Path) -> None:
    """The curve's AUC figures (its README, docs/benchmarks.md) come back from the saved estimates, without a model."""
    import json

    from benchmarks.value_rank import KINDS, kind_report, read_ranked_nodes

    report = nodes_file.with_name(nodes_file.name.replace("nodes-", "rank-").replace(".jsonl.gz", ".json"))
    shipped = {k["kind"]: k for k in json.loads(report.read_text())["kinds"]}
    nodes = read_ranked_nodes(nodes_file)
    for kind in KINDS:
        again = vars(kind_report(nodes, kind))
        again["within_tree_interval"] = list(again["within_tree_interval"])
        assert again == shipped[kind], (nodes_file.name, kind)
