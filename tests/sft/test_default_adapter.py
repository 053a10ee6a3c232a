"""``default`` is the embedded model with the shipped adapter merged in; ``default-base`` the base model.

The shipped adapter is never touched: ``jupiter.default_model.ADAPTERS_DIR`` is pointed at a temporary folder
holding a tiny adapter trained by the tests, and ``$JUPITER_CACHE`` at a temporary cache whose base model is a
link to the real converted one (so nothing is converted again and no merge lands in the user's cache).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jupiter.default_model as default_model
from jupiter.llm.model_dirs import resolve_model_dir

pytest.importorskip("peft")


@pytest.fixture
def cache(tmp_path, monkeypatch, base_model_dir) -> Path:
    root = tmp_path / "cache"
    (root / "models").mkdir(parents=True)
    (root / "models" / default_model.DEFAULT_MODEL_NAME).symlink_to(base_model_dir, target_is_directory=True)
    monkeypatch.setenv("JUPITER_CACHE", str(root))
    return root


@pytest.fixture
def shipped(tmp_path, monkeypatch, tiny_adapter) -> Path:
    adapters = tmp_path / "adapters"
    shutil.copytree(tiny_adapter, adapters / default_model.SHIPPED_ADAPTER_NAME,
                    ignore=shutil.ignore_patterns("checkpoints"))
    monkeypatch.setattr(default_model, "ADAPTERS_DIR", adapters)
    return adapters / default_model.SHIPPED_ADAPTER_NAME


def _tensor(folder: str | Path, name: str):
    from safetensors import safe_open

    with safe_open(str(Path(folder) / "model.safetensors"), "pt") as handle:
        key = next(k for k in handle.keys() if k.endswith(name))
        return handle.get_tensor(key)


def test_default_is_the_base_with_the_shipped_adapter_merged_in(cache, shipped, base_model_dir):
    merged = Path(resolve_model_dir("default"))
    assert merged.parent == cache / "models" and merged.name.startswith("gemma3-270m-nbqa-")
    assert (merged / "jupiter-merged.json").is_file() and (merged / "tokenizer.json").is_file()
    # the LoRA-adapted layers changed, the embeddings (not adapted) did not
    base_q = _tensor(base_model_dir, "layers.0.self_attn.q_proj.weight")
    tuned_q = _tensor(merged, "layers.0.self_attn.q_proj.weight")
    assert tuned_q.dtype == base_q.dtype and not bool((tuned_q == base_q).all())
    assert bool((_tensor(merged, "embed_tokens.weight") == _tensor(base_model_dir, "embed_tokens.weight")).all())
    stamp = (merged / "model.safetensors").stat().st_mtime_ns
    assert Path(resolve_model_dir("default")) == merged  # cached: not merged again
    assert (merged / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_retrained_adapter_gets_its_own_merge(cache, shipped):
    first = Path(resolve_model_dir("default"))
    from safetensors.torch import load_file, save_file

    weights = load_file(str(shipped / "adapter_model.safetensors"))
    save_file({k: v * 2 for k, v in weights.items()}, str(shipped / "adapter_model.safetensors"))
    second = Path(resolve_model_dir("default"))
    assert second != first and (second / "jupiter-merged.json").is_file()


_MERGE_IN_A_PROCESS = """
import logging, sys
from pathlib import Path
import jupiter.default_model as default_model
logging.basicConfig(level=logging.WARNING, format="%(message)s")
default_model.ADAPTERS_DIR = Path(sys.argv[1])
print(default_model.ensure_finetuned_default_model())
"""


def test_processes_that_need_the_merge_at_once_merge_it_once(cache, shipped):
    """Test workers, Ray actors or two solves on a fresh machine: the first merges, the others wait and reuse it."""
    env = {**os.environ, "JUPITER_CACHE": str(cache)}
    runs = [subprocess.Popen([sys.executable, "-c", _MERGE_IN_A_PROCESS, str(shipped.parent)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    folders = {out.strip() for out, _ in outputs}
    assert len(folders) == 1 and (Path(folders.pop()) / "jupiter-merged.json").is_file()
    merges = sum(err.count("merging the fine-tuned adapter") for _, err in outputs)
    assert merges == 1, [err[-2000:] for _, err in outputs]
    assert not list((cache / "models").glob(".merge-*"))  # no work folder left behind


def test_default_base_is_the_base_model(cache, shipped):
    assert Path(resolve_model_dir("default-base")) == cache / "models" / default_model.DEFAULT_MODEL_NAME


def test_without_a_shipped_adapter_default_is_the_base_with_one_warning(cache, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(default_model, "ADAPTERS_DIR", tmp_path / "no-adapters")
    caplog.set_level(logging.WARNING)
    assert Path(resolve_model_dir("default")) == cache / "models" / default_model.DEFAULT_MODEL_NAME
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no fine-tuned adapter" in warnings[0] and "\n" not in warnings[0]


def test_policies_load_the_fine_tuned_and_the_base_folders(cache, shipped, monkeypatch):
    from jupiter.llm.spec import describe_policy, load_policy

    monkeypatch.setenv("JUPITER_DEFAULT_LLM", "hf")
    with load_policy("default") as policy:
        details = describe_policy(policy)
        assert details["spec"] == "hf:default" and Path(details["model"]).name.startswith("gemma3-270m-nbqa-")
    with load_policy("default-base") as policy:
        details = describe_policy(policy)
        assert details["requested"] == "default-base" and details["spec"] == "hf:default-base"
        assert Path(details["model"]) == cache / "models" / default_model.DEFAULT_MODEL_NAME


def test_the_real_shipped_adapter_folder_is_where_the_package_data_says(monkeypatch):
    """setup.cfg ships jupiter/adapters/*/* in the wheel: the folder must sit under the jupiter package."""
    import configparser

    import jupiter

    config = configparser.ConfigParser()
    config.read(Path(jupiter.__file__).resolve().parent.parent / "setup.cfg")
    assert "adapters/*/*" in config["options.package_data"]["jupiter"]
    assert default_model.ADAPTERS_DIR == Path(jupiter.__file__).resolve().parent / "adapters"


@pytest.mark.slow
def test_vllm_default_loads_the_merged_folder(cache, shipped):
    pytest.importorskip("vllm")
    from jupiter.llm.spec import describe_policy, load_policy

    with load_policy("vllm:default") as policy:
        assert Path(describe_policy(policy)["model"]).name.startswith("gemma3-270m-nbqa-")
