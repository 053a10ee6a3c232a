"""Tree packing computes every path's value as the path alone does, each shared token once.

On a real tree of the fine-tuned default (the README demo at seed 1), in float32, with Gemma 3's sliding-window
layers in play (paths longer than its 512-token window): values within 1e-3 of the per-path computation, the
pooled features too, and the LoRA weights' gradients close.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from value_model.config import ModelConfig  # noqa: E402
from value_model.extract import read_trees  # noqa: E402
from value_model.model import ValueModel, load_tokenizer, mean_pool, resolve_backbone  # noqa: E402
from value_model.packing import pack_sequences  # noqa: E402
from value_model.truncate import prepare_path  # noqa: E402

TREE = Path(__file__).resolve().parent / "data" / "demo_tree_seed1.json"


@pytest.fixture(scope="module")
def model_and_paths():
    backbone = resolve_backbone("default")
    config = ModelConfig(backbone=backbone, max_tokens=4096)
    model = ValueModel.create(config, device="cpu").float().eval()
    torch.manual_seed(0)
    torch.nn.init.normal_(model.head.linear.weight, std=0.05)  # a head that does not flatten differences
    tokenizer = load_tokenizer(backbone)
    [nodes] = list(read_trees(TREE))
    template = config.template.template()
    paths = [list(prepare_path(n["messages"], tokenizer, config.max_tokens, template).input_ids) for n in nodes]
    return model, paths


def _per_path(model, paths):
    return [model(torch.tensor([p]), torch.ones((1, len(p)), dtype=torch.long)) for p in paths]


def test_the_tree_packs_into_a_fraction_of_the_per_path_tokens(model_and_paths):
    _model, paths = model_and_paths
    packed = pack_sequences(paths)
    assert len(paths) >= 10 and max(map(len, paths)) > 512  # sliding-window layers matter here
    assert packed.tokens <= 0.3 * sum(map(len, paths))


@pytest.mark.slow  # 15 paths of up to 1,000+ tokens through the backbone in fp32, one by one: a minute here
def test_packed_values_and_features_equal_the_per_path_computation(model_and_paths):
    model, paths = model_and_paths
    packed = pack_sequences(paths)
    with torch.no_grad():  # ValueModel.forward is head(mean_pool(decoder(path))): its parts, path by path
        features = torch.cat([mean_pool(model.decoder(input_ids=torch.tensor([p]), use_cache=False).last_hidden_state,
                                        torch.ones((1, len(p)))) for p in paths])
        alone = model.head(features)
        together = model.forward_packed(packed)
        masks = packed.attention_masks(model.lm.config.sliding_window)
        hidden = model.decoder(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=masks,
                               use_cache=False).last_hidden_state[0]
        pooled = packed.pool_weights() @ hidden
    assert torch.allclose(together, alone, atol=1e-3), (together - alone).abs().max()
    assert torch.allclose(pooled, features, atol=1e-3, rtol=1e-3)
    single = paths[0]
    assert torch.allclose(model(torch.tensor([single]), torch.ones((1, len(single)), dtype=torch.long)), alone[:1])


@pytest.mark.slow
def test_packed_gradients_of_the_lora_weights_match(model_and_paths):
    model, paths = model_and_paths
    paths = paths[:8]
    targets = torch.linspace(-0.9, 0.9, len(paths))
    grads = []
    for packed_run in (False, True):
        model.zero_grad(set_to_none=True)
        values = model.forward_packed(pack_sequences(paths)) if packed_run else torch.cat(_per_path(model, paths))
        torch.nn.functional.mse_loss(values, targets).backward()
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()
                      if p.requires_grad and p.grad is not None and "lora" in n})
    per_path, packed = grads
    assert per_path and per_path.keys() == packed.keys()
    for name in per_path:
        scale = per_path[name].abs().max().clamp(min=1e-8)
        assert ((packed[name] - per_path[name]).abs().max() / scale) < 1e-2, name
