"""Tree-packed training takes the step per-path training takes, for a fraction of the tokens.

The real tree of the README demo (seed 1, the fine-tuned default, ``data/demo_tree_seed1.json``: 15 nodes, paths
of 292-704 tokens), each node a sample labelled with its own value and its tree in ``sources``. From the same
initial weights, one optimizer step on one pack and one step on one per-path batch of the same samples (fp32,
dropout off, so both see the same numbers) give the same loss and LoRA weight updates within 1e-3 of their size,
while the pack computes 13 % of the per-path tokens (at most 30 % asked). The default suite runs a tiny random
Gemma 3 decoder (a sliding-window layer with a 64-token window and a full-attention layer) on the real
tokenizer; the real backbone (a minute of fp32 forward passes per path on 2 CPU cores) is slow.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from value_model.config import ModelConfig, TrainConfig  # noqa: E402
from value_model.extract import Sample, read_trees  # noqa: E402

TREE = Path(__file__).resolve().parent / "data" / "demo_tree_seed1.json"


def tree_samples() -> list[Sample]:
    [nodes] = list(read_trees(TREE))
    values = torch.linspace(-0.9, 0.9, len(nodes)).tolist()
    return [Sample(messages=tuple(n["messages"]), text="", value=v, visits=1, value_sum=v,
                   sources=(f"{TREE.name}#{n['tag']}",), depth=int(n["depth"])) for n, v in zip(nodes, values)]


def _config():
    from value_model.model import resolve_backbone

    # dropout off: the packed and the per-path step must see the same numbers
    return ModelConfig(backbone=resolve_backbone("default"), max_tokens=4096, lora_dropout=0.0, head_dropout=0.0,
                       lora_layers=(16, 17))


@pytest.fixture(scope="module")
def tiny_model():
    """A random 2-layer Gemma 3 decoder (sliding window 64, then full attention) with LoRA and a value head."""
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from value_model.model import ValueHead, ValueModel, load_tokenizer

    config = _config()
    torch.manual_seed(0)
    lm = Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=len(load_tokenizer(config.backbone)), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=64,
        layer_types=["sliding_attention", "full_attention"]))
    for parameter in lm.parameters():
        parameter.requires_grad_(False)
    peft_model = get_peft_model(lm, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                               target_modules=list(config.lora_targets)))
    head = ValueHead(32, dropout=0.0, init_std=0.05)  # a head that does not flatten differences
    return ValueModel(lm, peft_model, head, config)


@pytest.fixture(scope="module")
def model():
    from value_model.model import ValueModel

    torch.manual_seed(0)
    return ValueModel.create(_config(), device="cpu")  # LoRA on the top 2 layers: a cheaper per-path backward


def _one_step(model, samples: list[Sample], packing: bool, tmp_path: Path):
    """The trainable weights' change in one optimizer step, and the run's result; the model is put back after."""
    from value_model.train import train_value_model

    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    head = {k: v.clone() for k, v in model.head.state_dict().items()}
    config = TrainConfig(epochs=1, batch_size=len(samples), learning_rate=1e-3, warmup_steps=0, eval_fraction=0.0,
                         gradient_checkpointing=False, packing=packing, progress=False, device="cpu", max_steps=1)
    result = train_value_model(samples, model.config, config, tmp_path / ("packed" if packing else "per-path"),
                               model=model)
    update = {n: p.detach() - start[n] for n, p in model.named_parameters() if p.requires_grad}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name in start:
                parameter.copy_(start[name])
    model.head.load_state_dict(head)  # the centering buffers too
    return update, result


def _check_packed_equals_per_path(model, samples: list[Sample], tmp_path: Path) -> float:
    packed_update, packed = _one_step(model, samples, True, tmp_path)
    path_update, per_path = _one_step(model, samples, False, tmp_path)
    [packed_epoch], [path_epoch] = packed.epochs, per_path.epochs
    assert (packed.steps, packed_epoch.packs, packed_epoch.batches) == (1, 1, 1)  # the whole tree is one pack
    assert (per_path.steps, path_epoch.packs) == (1, 0)
    assert packed_epoch.tokens_per_path == path_epoch.tokens_per_path  # the same paths
    assert packed_epoch.tokens_computed <= 0.3 * path_epoch.tokens_per_path
    assert packed.history[-1].train_loss == pytest.approx(per_path.history[-1].train_loss, abs=1e-5)
    lora = [n for n in path_update if "lora_" in n]
    assert lora and any(float(path_update[n].abs().max()) > 0 for n in lora)
    difference = math.sqrt(sum(float((packed_update[n] - path_update[n]).pow(2).sum()) for n in lora))
    size = math.sqrt(sum(float(path_update[n].pow(2).sum()) for n in lora))
    assert difference <= 1e-3 * size, (difference, size)
    for name in ("head.linear.weight", "head.linear.bias"):
        assert torch.allclose(packed_update[name], path_update[name], atol=1e-6)
    return packed_epoch.tokens_computed / path_epoch.tokens_per_path


def test_one_packed_step_equals_one_per_path_step_on_the_tree_tiny_model(tiny_model, tmp_path: Path) -> None:
    share = _check_packed_equals_per_path(tiny_model, tree_samples(), tmp_path)
    assert share < 0.15  # 1,090 of 8,330 tokens


@pytest.mark.slow
def test_one_packed_step_equals_one_per_path_step_on_the_tree_real_backbone(model, tmp_path: Path) -> None:
    share = _check_packed_equals_per_path(model, tree_samples(), tmp_path)
    assert share < 0.15


def test_a_tree_too_large_for_one_pack_is_split_and_truncated_paths_go_per_path() -> None:
    from value_model.batches import plan_batches
    from value_model.data import EncodedSample

    task = tuple(range(100))
    encoded = [EncodedSample(task, 0.0), EncodedSample(task + (1,) * 50, 0.1), EncodedSample(task + (2,) * 50, 0.2),
               EncodedSample(task + (1,) * 50 + (3,) * 40, 0.3), EncodedSample(task + (9,) * 20, 0.4, truncated=True),
               EncodedSample(task + (4,) * 10, 0.5)]
    trees = ["a"] * 5 + [None]
    plan = plan_batches(encoded, trees, budget=200)
    # token order: task, task+1s, task+1s+3s (one trie of 190 tokens), then task+2s would add 50: a new pack
    # of one, which gains nothing and goes per path with the truncated path and the one without a tree
    assert plan.packs == ((0, 1, 3),) and plan.per_path == (2, 4, 5)
    assert plan_batches(encoded, trees, budget=400).packs == ((0, 1, 3, 2),)
    assert plan_batches(encoded, trees, budget=400, packing=False).per_path == tuple(range(6))
