"""The shared value-scorer actor with a real value model (the tiny Gemma backbone, fresh LoRA and head)."""

from __future__ import annotations

import pytest

from jupiter.task import load_tasks
from search import Mode, SearchConfig, load_tree
from search.ray_driver import RayResources, solve_tasks_ray
from search.ray_manifest import Manifest, TaskStatus


@pytest.fixture(scope="module")
def value_dir(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from jupiter.default_model import ModelError, ensure_default_model
    from value_model import ModelConfig, ValueModel

    try:
        backbone = str(ensure_default_model())
    except ModelError as exc:
        pytest.skip(f"default model unavailable: {exc}")
    folder = tmp_path_factory.mktemp("value-model")
    ValueModel.create(ModelConfig(backbone=backbone), device="cpu").save(folder)
    return folder


@pytest.mark.slow
def test_value_actor_scores_every_live_node(ray_local, task_files, tmp_path, value_dir):
    tasks = load_tasks(task_files[0])[:2]
    config = SearchConfig(mode=Mode.COLLECT, iterations=3, temperature=1.0, max_trees_in_flight=2, cell_timeout=60)
    out = tmp_path / "collect"
    summary = solve_tasks_ray(tasks, f"replay:{task_files[1]}", config, out, value_model=value_dir, workers=1,
                              progress=False, resources=RayResources(worker_memory_mb=512, value_memory_mb=2048))
    assert summary.done == 2
    for record in Manifest(out).read():
        assert record.status is TaskStatus.OK
        tree = load_tree(out / record.tree_file)
        live = [n for n in tree.nodes if n.parent is not None and not n.is_terminal]
        assert live and all(n.evaluation is not None and -1.0 <= n.evaluation <= 1.0 for n in live)
        assert any(n.evaluation != 0.0 for n in live)  # estimates came from the model, not the 0 fallback
