"""The value model on the real Gemma 3 270M backbone (CPU): training steps, save/load, scoring, resume.

Paths here are short hand-written chats (tens of tokens) so that the default suite stays fast; the
learning test on realistic paths is ``test_learning.py`` (slow).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from value_model.config import ModelConfig, TrainConfig
from value_model.extract import Sample

TASK = {"role": "user", "content": "Task: what is 6 times 7?"}


def _path(code: str, observation: str) -> list[dict]:
    return [TASK, {"role": "assistant", "content": f"Thought: compute it\nAction:\n```python\n{code}\n```"},
            {"role": "user", "content": f"Observation:\n{observation}"}]


HISTORIES = [
    _path("print(6*7)", "42"),
    _path("print(6*y)", "NameError: name 'y' is not defined"),
    [TASK],
    _path("x = 6 * 7\nprint('the product of six and seven is', x, 'which we report')", "the product ... 42"),
]
VALUES = [0.9, -0.8, 0.0, 0.7]


def _samples() -> list[Sample]:
    return [Sample(messages=tuple(h), text="", value=v, visits=1, value_sum=v) for h, v in zip(HISTORIES, VALUES)]


def _train_config(**changes) -> TrainConfig:
    values = dict(epochs=1, batch_size=2, grad_accumulation=1, learning_rate=1e-3, head_learning_rate=1e-3,
                  eval_fraction=0.0, gradient_checkpointing=True, warmup_steps=0, progress=False, device="cpu")
    values.update(changes)
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def trained(backbone: str, tmp_path_factory):
    """Two optimizer steps with gradient checkpointing on; returns (model, before, out_dir, result)."""
    from value_model.model import ValueModel
    from value_model.train import train_value_model

    config = ModelConfig(backbone=backbone, max_tokens=128)
    model = ValueModel.create(config, device="cpu")
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    base_sums = {name: float(p.detach().double().sum()) for name, p in model.named_parameters()
                 if not p.requires_grad}
    out = tmp_path_factory.mktemp("value") / "model"
    result = train_value_model(_samples(), config, _train_config(max_steps=2), out, model=model)
    model.eval()
    return model, before, base_sums, out, result


def test_two_steps_change_lora_and_head_but_not_the_base(trained) -> None:
    model, before, base_sums, _, result = trained
    assert result.steps == 2
    assert model.lm.is_gradient_checkpointing
    after = dict(model.named_parameters())
    lora_b = [n for n in before if "lora_B" in n]
    lora_a = [n for n in before if "lora_A" in n]
    head = [n for n in before if n.startswith("head.")]
    assert lora_b and lora_a and len(head) == 2
    assert set(before) == set(lora_a + lora_b + head)  # nothing else is trainable
    # lora_B starts at zero: it moves only if checkpointed blocks really passed gradients to the adapters.
    assert all(not torch.equal(before[n], after[n].detach()) for n in lora_b)
    assert all(after[n].detach().abs().sum() > 0 for n in lora_b)
    assert all(not torch.equal(before[n], after[n].detach()) for n in lora_a + head)
    assert all(float(p.detach().double().sum()) == base_sums[n] for n, p in after.items() if n in base_sums)


def test_saved_folder_has_adapter_head_and_config(trained) -> None:
    _, _, _, out, _ = trained
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert (out / "value_head.safetensors").is_file()
    config = json.loads((out / "value_config.json").read_text())
    assert config["backbone"] and config["lora_r"] == 8 and config["max_tokens"] == 128
    assert json.loads((out / "metrics.json").read_text())["steps"] == 2


@pytest.fixture(scope="module")
def scorer(trained):
    from value_model.scorer import ValueScorer

    return ValueScorer.load(trained[3], device="cpu", batch_size=8)


def test_a_scorer_in_bfloat16_scores_close_to_float32(trained, scorer) -> None:
    """``ValueScorer(dtype="bfloat16")`` (``jupiter value score|rank --dtype``): the backbone in bf16, also on a
    CPU; the values stay close to fp32's (the head and pooling run in fp32)."""
    from value_model.scorer import ValueScorer

    half = ValueScorer.load(trained[3], device="cpu", batch_size=8, dtype="bfloat16")
    assert half.model.lm.dtype == torch.bfloat16 and scorer.model.lm.dtype == torch.float32
    scorer.clear_cache()
    full = scorer.evaluate(HISTORIES)
    assert half.evaluate(HISTORIES) == pytest.approx(full, abs=0.05)
    with pytest.raises(ValueError, match="dtype"):
        ValueScorer.load(trained[3], device="cpu", dtype="float16")


def test_a_scorer_with_merged_adapters_scores_as_the_unmerged_model(trained, scorer) -> None:
    """``merge_lora`` (the default) folds the LoRA weights into the backbone (PEFT's ``merge_adapter``): every
    adapted projection runs as one matmul, and the values stay those of the adapters run apart."""
    from peft.tuners.lora import LoraLayer

    from value_model.scorer import ValueScorer

    apart = ValueScorer.load(trained[3], device="cpu", batch_size=8, merge_lora=False)
    layers = [m for m in scorer.model.modules() if isinstance(m, LoraLayer)]
    assert layers and all(m.merged for m in layers)
    assert not any(m.merged for m in apart.model.modules() if isinstance(m, LoraLayer))
    scorer.clear_cache()
    merged = scorer.evaluate(HISTORIES)
    assert merged == pytest.approx(apart.evaluate(HISTORIES), abs=1e-5)
    assert max(merged) - min(merged) > 1e-4  # the trained adapters and head tell these paths apart


def test_save_then_load_gives_identical_scores(trained, scorer) -> None:
    from value_model.data import collate
    from value_model.truncate import prepare_path

    model = trained[0]
    scorer.clear_cache()
    scored = scorer.evaluate(HISTORIES)
    ids = [prepare_path(h, scorer.tokenizer, 128).input_ids for h in HISTORIES]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # the scorer's batch layout
    input_ids, mask = collate([ids[i] for i in order], scorer.pad_id)
    with torch.inference_mode():
        direct = model(input_ids, mask).tolist()
    expected = [0.0] * len(ids)
    for i, v in zip(order, direct):
        expected[i] = v
    assert scored == pytest.approx(expected, abs=1e-5)  # the paths share their task prefix: run once, not 4 times
    assert all(-1.0 <= v <= 1.0 for v in scored)
    assert len(set(round(v, 6) for v in scored)) == len(scored)  # distinct paths get distinct values


def test_scores_do_not_depend_on_batching_or_padding(scorer) -> None:
    values = {}
    for batch_size, sort in ((1, True), (4, False), (3, True)):
        scorer.clear_cache()
        scorer.batch_size, scorer.sort_by_length = batch_size, sort
        values[batch_size] = scorer.evaluate(HISTORIES)
    scorer.batch_size, scorer.sort_by_length = 8, True
    assert values[1] == pytest.approx(values[4], abs=1e-5)
    assert values[1] == pytest.approx(values[3], abs=1e-5)


def test_paths_sharing_a_prefix_score_as_whole_paths(scorer) -> None:
    """The prefix runs once for a group (siblings share their parent's path, nodes of a task its system and task
    turns): the values are those of whole paths, also past Gemma 3's 512-token sliding window."""
    generator = torch.Generator().manual_seed(0)
    base = torch.randint(10, 5000, (700,), generator=generator).tolist()

    def tail(n: int) -> list[int]:
        return torch.randint(10, 5000, (n,), generator=generator).tolist()

    sequences = [base[:300] + tail(n) for n in (5, 40, 90)] + [base[:600] + tail(n) for n in (30, 120)]
    sequences += [tail(200), base[:20] + tail(30)]  # one shares nothing, one too little to be worth a group
    try:
        scorer.share_prefix = False
        whole = scorer.score_token_ids(sequences)
        scorer.share_prefix = True
        shared = scorer.score_token_ids(sequences)
    finally:
        scorer.share_prefix = True
    assert shared == pytest.approx(whole, abs=1e-5)
    assert len({round(v, 5) for v in whole}) == len(whole)


def _three_expansions() -> list[list[list[int]]]:
    """The calls of three expansions of one tree (a 600-token task, 100-token children, 80-token grandchildren,
    one 60-token great-grandchild), then the grandchildren again."""
    generator = torch.Generator().manual_seed(1)

    def turn(first: int, n: int) -> list[int]:  # distinct first tokens: siblings diverge at once
        return [first] + torch.randint(10, 5000, (n - 1,), generator=generator).tolist()

    task = turn(7, 600)
    children = [task + turn(5001 + i, 100) for i in range(3)]
    grandchildren = [children[0] + turn(5101 + i, 80) for i in range(3)]
    lone = [grandchildren[1] + turn(5201, 60)]
    return [children, grandchildren, lone, grandchildren]


def _replay(scorer, calls, keep_paths: bool) -> tuple[list, list[int], list[int]]:
    """Each call's values, and the tokens it reused from kept beginnings and ran, from an empty cache."""
    scorer.keep_paths = keep_paths
    scorer.clear_cache()
    kept, reused, run = [], [], []
    try:
        for call in calls:
            before = scorer.cache_stats()
            kept.append(scorer.score_token_ids(call))
            reused.append(scorer.cache_stats().prefix_tokens_reused - before.prefix_tokens_reused)
            run.append(scorer.cache_stats().tokens_run - before.tokens_run)
    finally:
        scorer.keep_paths = True
    return kept, reused, run


def _whole_paths(scorer, calls) -> list:
    try:
        scorer.share_prefix = False
        return [scorer.score_token_ids(call) for call in calls]
    finally:
        scorer.share_prefix = True


def test_a_later_call_continues_from_the_path_an_earlier_call_encoded(scorer) -> None:
    """``keep_paths=False``: the children's common beginning is kept, the next call's children start from it,
    and a lone grandchild runs only its own turn; every value is the whole path's, past the sliding window too,
    and a kept beginning is not changed by being used."""
    calls = _three_expansions()
    whole = _whole_paths(scorer, calls)
    kept, reused, run = _replay(scorer, calls, keep_paths=False)
    for values, expected in zip(kept, whole):
        assert values == pytest.approx(expected, abs=1e-5)
    # from nothing; from the task's 600 tokens; from the grandchildren's parent path (700 tokens); the
    # grandchildren again, now from their parent path
    assert reused == [0, 600, 700, 700]
    assert run == [600 + 3 * 100, 100 + 3 * 80, 60 + 80, 3 * 80]  # each token once, apart from call 3's parent turn
    assert scorer.cache_stats().prefixes == 2


def test_with_every_scored_path_kept_each_token_of_a_tree_runs_once(scorer) -> None:
    """``keep_paths`` (the default): every scored path is kept, so a node's children continue from the node's own
    path and no turn runs twice; a path asked for again runs nothing. The values are the whole paths'."""
    calls = _three_expansions()
    whole = _whole_paths(scorer, calls)
    kept, reused, run = _replay(scorer, calls, keep_paths=True)
    for values, expected in zip(kept, whole):
        assert values == pytest.approx(expected, abs=1e-5)
    assert run == [600 + 3 * 100, 3 * 80, 60, 0]
    assert reused == [3 * 600, 700 + 3 * 700, 780, 700 + 3 * 780]
    assert scorer.cache_stats().prefixes == 1 + 3 + 3 + 1  # the task, the children, the grandchildren, the lone one


def test_kept_beginnings_are_bounded_in_bytes_and_found_by_longest_match() -> None:
    from value_model.model import PrefixState
    from value_model.prefix_cache import PrefixCache

    def state(n: int) -> PrefixState:  # 1 byte a token here
        return PrefixState(cache=None, hidden_sum=torch.zeros(1, 4), length=n, nbytes=n)

    kept = PrefixCache(budget_bytes=10)
    kept.add([1, 2, 3], state(3))
    kept.add([1, 2, 3, 4, 5], state(5))
    assert kept.longest([1, 2, 3, 4, 5, 6], limit=6).length == 5
    assert kept.longest([1, 2, 3, 4, 5, 6], limit=4).length == 3  # at most ``limit`` tokens
    assert kept.longest([1, 2, 9], limit=3) is None
    kept.add([1, 2, 3], state(3))  # already kept: only refreshed, so [1..5] is now the oldest
    kept.add([7, 8, 9], state(3))  # 11 bytes > 10: the least recently used goes
    assert (len(kept), kept.nbytes) == (2, 6)
    assert kept.longest([1, 2, 3, 4, 5], limit=5).length == 3
    kept.add(list(range(11)), state(11))  # larger than the whole budget: not kept
    assert kept.nbytes == 6
    off = PrefixCache(budget_bytes=0)
    off.add([1, 2, 3], state(3))
    assert len(off) == 0 and off.longest([1, 2, 3, 4], limit=4) is None
    with pytest.raises(ValueError, match="budget_bytes"):
        PrefixCache(budget_bytes=-1)


def test_shared_prefix_groups() -> None:
    from value_model.data import shared_prefix_groups

    a = [1, 2, 3, 4, 5, 6]
    sequences = [a + [7], [9, 9, 9, 9], a + [8, 8], a[:4] + [0, 0, 0], a]
    groups, rest = shared_prefix_groups(sequences, max_group=8, min_shared=3)
    assert groups == [(4, [3, 4, 0, 2])] and rest == [1]  # every member keeps at least one token of its own
    groups, rest = shared_prefix_groups(sequences, max_group=2, min_shared=3)
    assert [len(m) for _, m in groups] == [2, 2] and rest == [1]
    assert shared_prefix_groups(sequences, max_group=8, min_shared=5) == ([(5, [4, 0, 2])], [3, 1])
    assert shared_prefix_groups([], 8, 3) == ([], [])
    # two tasks' children side by side, sharing only a 3-token system turn: two groups with their parents'
    # paths, not one cut down to the system turn
    system, one, two = [1, 1, 1], [2] * 10, [3] * 10
    sequences = [system + one + [4], system + one + [5], system + two + [6], system + two + [7], system + two + [8]]
    assert shared_prefix_groups(sequences, max_group=8, min_shared=3) == ([(13, [0, 1]), (13, [2, 3, 4])], [])
    # a lone path beside them (its siblings were duplicates, scored once) runs whole and leaves the group be
    assert shared_prefix_groups(sequences[1:], max_group=8, min_shared=3) == ([(13, [1, 2, 3])], [0])


def test_cache_and_input_order(scorer) -> None:
    from search.protocols import Value

    assert isinstance(scorer, Value)
    scorer.clear_cache()
    hits, misses = scorer.cache_stats().hits, scorer.cache_stats().misses
    first = scorer.evaluate(HISTORIES)
    assert scorer.cache_stats().misses - misses == 4
    reordered = scorer.evaluate([HISTORIES[2], HISTORIES[0], HISTORIES[0]])
    assert reordered == [first[2], first[0], first[0]]
    stats = scorer.cache_stats()
    assert (stats.hits - hits, stats.misses - misses, stats.size) == (3, 4, 4)
    assert scorer.evaluate([]) == []


def test_training_resumes_from_its_checkpoint(backbone: str, tmp_path: Path) -> None:
    from value_model.train import latest_checkpoint, train_value_model

    config = ModelConfig(backbone=backbone, max_tokens=128)
    out = tmp_path / "run"
    settings = dict(batch_size=1, gradient_checkpointing=False, checkpoint_every=1)
    first = train_value_model(_samples(), config, _train_config(max_steps=1, **settings), out)
    assert first.steps == 1 and latest_checkpoint(out).name == "checkpoint-1"
    second = train_value_model(_samples(), config, _train_config(max_steps=3, **settings), out)
    assert second.resumed_from == 1 and second.steps == 3
    assert latest_checkpoint(out).name == "checkpoint-3"
    epochs = [entry["epoch"] for entry in json.loads((out / "metrics.json").read_text())["history"]]
    assert epochs == sorted(set(epochs))  # the epoch the first run stopped in is recorded once, after the resume


def test_head_centers_in_training_and_freezes_in_eval() -> None:
    from value_model.model import ValueHead, mean_pool

    head = ValueHead(4, dropout=0.0, init_std=0.1, center_momentum=0.5)
    batch = torch.tensor([[10.0, 0, 0, 0], [12.0, 0, 0, 0]])
    head.train()
    head(batch)
    assert head.center.tolist() == [11.0, 0, 0, 0]  # the first batch's mean, exactly
    head.eval()
    before = head.center.clone()
    values = head(batch)
    assert torch.equal(head.center, before)
    assert values.dtype == torch.float32 and values.shape == (2,) and bool((values.abs() < 1).all())
    assert set(head.state_dict()) == {"center", "center_updates", "linear.weight", "linear.bias"}
    # padding never counts in the mean
    hidden = torch.tensor([[[1.0], [3.0], [100.0]]])
    assert mean_pool(hidden, torch.tensor([[1, 1, 0]])).tolist() == [[2.0]]


def _tiny_value_model(config: ModelConfig):
    """A real (random, 1-layer, 16-wide) Gemma 3 decoder with LoRA and a value head, on the real tokenizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from value_model.model import ValueHead, ValueModel, load_tokenizer

    vocab = len(load_tokenizer(config.backbone))
    torch.manual_seed(0)
    lm = Gemma3ForCausalLM(Gemma3TextConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                                            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                            head_dim=8))
    for parameter in lm.parameters():
        parameter.requires_grad_(False)
    peft_model = get_peft_model(lm, LoraConfig(r=2, lora_alpha=4, target_modules=list(config.lora_targets)))
    return ValueModel(lm, peft_model, ValueHead(16), config)


def test_the_trainer_applies_steps_warmup_decay_clipping_and_weight_decay(backbone: str, tmp_path: Path,
                                                                         monkeypatch) -> None:
    """Optimizer steps = epochs x ceil(batches / accumulation); the LR warms up linearly from 0 over
    ``warmup_steps`` (Trainer's ``linear`` schedule, as the reference code's Trainer) and decays linearly; every
    step clips at ``max_grad_norm``; AdamW decays the matrices."""
    from transformers import TrainerCallback

    from value_model.train import lr_factor, train_value_model, training_schedule

    clipped: dict[int, float] = {}  # step -> the gradient norm the optimizer sees, after Trainer's clipping

    def after_clipping(self, args, state, control, model=None, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        clipped[state.global_step] = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g)
                                                                                 for g in grads])))

    # every callback of the run inherits the hook; Trainer calls it between clipping and the optimizer step
    monkeypatch.setattr(TrainerCallback, "on_pre_optimizer_step", after_clipping)
    config = _train_config(epochs=3, batch_size=1, grad_accumulation=2, warmup_steps=2, max_grad_norm=0.5,
                           gradient_checkpointing=False, weight_decay=0.01)
    out = tmp_path / "run"
    model_config = ModelConfig(backbone=backbone, max_tokens=128, lora_targets=("q_proj", "v_proj"))
    model = _tiny_value_model(model_config)  # the trainer's logic, not the backbone's size, is under test
    result = train_value_model(_samples(), model_config, config, out, model=model)
    schedule = training_schedule(4, config)
    assert (schedule.steps_per_epoch, schedule.total_steps, schedule.warmup_steps) == (2, 6, 2)
    assert result.steps == 6 and len(result.learning_rates) == 6
    expected = [1e-3 * lr_factor(s, 2, 6) for s in range(6)]
    assert result.learning_rates == pytest.approx(expected)
    assert result.learning_rates == pytest.approx([0.0, 5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4])
    assert len(result.grad_norms) == 6 and sorted(clipped) == list(range(6))
    for before, after in zip(result.grad_norms, [clipped[s] for s in range(6)], strict=True):
        assert after == pytest.approx(min(before, 0.5), rel=1e-4)  # clipped to max_grad_norm, never above
    assert max(result.grad_norms) > 0.5  # so the clipping above was exercised
    checkpoint = out / "checkpoints" / "checkpoint-6"  # Trainer's checkpoint files
    optimizer = torch.load(checkpoint / "optimizer.pt", weights_only=False)
    decays = sorted(g["weight_decay"] for g in optimizer["param_groups"])
    assert decays[-1] == 0.01 and decays[0] == 0.0  # matrices decayed (LoRA and head), biases not
    assert torch.load(checkpoint / "scheduler.pt", weights_only=False)["last_epoch"] == 6


def test_training_in_bfloat16_on_a_cpu_keeps_the_head_in_full_precision(backbone: str, tmp_path: Path,
                                                                       monkeypatch) -> None:
    """``TrainConfig.dtype="bfloat16"``: the backbone's weights in bf16 and Trainer's bf16 autocast, also on a CPU
    (the default there stays fp32); the head and its pooling stay fp32, and the saved model scores."""
    from value_model.model import ValueModel
    from value_model.train import train_value_model
    from value_model.trainer import training_arguments, training_dtype

    cpu = torch.device("cpu")
    assert training_dtype(_train_config(), cpu) == torch.float32
    assert not training_arguments(_train_config(), tmp_path, cpu, 2, False, False).bf16
    assert training_arguments(_train_config(dtype="bfloat16"), tmp_path, cpu, 2, False, False).bf16
    made: list[ValueModel] = []
    real_create = ValueModel.create

    def create(*args, **kwargs):
        made.append(real_create(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ValueModel, "create", create)
    config = _train_config(dtype="bfloat16", max_steps=2, gradient_checkpointing=False)
    result = train_value_model(_samples(), ModelConfig(backbone=backbone, max_tokens=128), config, tmp_path / "run")
    assert result.steps == 2 and all(math.isfinite(g) for g in result.grad_norms)
    assert made[0].lm.dtype == torch.bfloat16 and made[0].head.linear.weight.dtype == torch.float32
    lora = [p for n, p in made[0].named_parameters() if "lora_" in n]
    assert lora and all(p.dtype == torch.float32 for p in lora)  # peft keeps the adapters in fp32
    loaded = ValueModel.load(tmp_path / "run", device="cpu")
    ids = torch.tensor([[2, 10, 11, 12]])
    with torch.no_grad():
        assert math.isfinite(float(loaded(ids, torch.ones_like(ids))[0]))


@pytest.mark.parametrize("keep_paths", [True, False])
def test_a_non_finite_value_comes_out_as_nan_and_is_not_cached(scorer, monkeypatch, keep_paths) -> None:
    """A NaN (or infinite) model output must never reach the search as a number: NaN out, every time, whether
    the paths run one by one from kept beginnings (``value_of``) or as whole padded batches (``forward``)."""
    import math

    bad = iter([float("nan"), float("inf")])  # clamp would turn the infinity into 1.0
    real_value_of, real_forward = scorer.model.value_of, scorer.model.forward

    def broken_value_of(state):
        value = real_value_of(state).clone()
        value[0] = next(bad, value[0].item())
        return value

    def broken_forward(input_ids, attention_mask):
        values = real_forward(input_ids, attention_mask).clone()
        values[0] = float("nan")
        if len(values) > 1:
            values[1] = float("inf")
        return values

    scorer.clear_cache()
    size_before, invalid_before = scorer.cache_stats().size, scorer.cache_stats().invalid
    if keep_paths:
        monkeypatch.setattr(scorer.model, "value_of", broken_value_of)
    else:
        monkeypatch.setattr(scorer.model, "forward", broken_forward)
        monkeypatch.setattr(scorer, "keep_paths", False)
    scorer.batch_size = 8
    values = scorer.evaluate(HISTORIES)  # one batch, longest path first
    assert sum(math.isnan(v) for v in values) == 2
    assert all(-1.0 <= v <= 1.0 for v in values if not math.isnan(v))
    stats = scorer.cache_stats()
    assert stats.invalid - invalid_before == 2 and stats.size - size_before == 2  # the NaNs are not cached
    bad = iter([float("nan"), float("inf")])
    again = scorer.evaluate(HISTORIES)
    assert [math.isnan(v) for v in again] == [math.isnan(v) for v in values]
    monkeypatch.undo()
    scorer.clear_cache()
    assert not any(math.isnan(v) for v in scorer.evaluate(HISTORIES))


def test_a_non_finite_loss_stops_training_instead_of_poisoning_the_weights(backbone: str, tmp_path: Path) -> None:
    from value_model.train import train_value_model

    model_config = ModelConfig(backbone=backbone, max_tokens=128, lora_targets=("q_proj", "v_proj"))
    samples = _samples()
    samples[1] = Sample(messages=samples[1].messages, text="", value=float("nan"), visits=1, value_sum=0.0)
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        train_value_model(samples, model_config, _train_config(batch_size=1, gradient_checkpointing=False),
                          tmp_path / "run", model=_tiny_value_model(model_config))


def test_the_default_backbone_is_the_fine_tuned_policy_and_default_base_the_base(monkeypatch, tmp_path) -> None:
    """The paper trains the value model on the fine-tuned policy's backbone: ``--base default`` must resolve to
    the same folder as ``--llm default``, not to the base model."""
    from value_model.model import ModelLoadError, resolve_backbone

    monkeypatch.setattr("jupiter.default_model.ensure_finetuned_default_model", lambda: tmp_path / "tuned")
    monkeypatch.setattr("jupiter.default_model.ensure_default_model", lambda: tmp_path / "base")
    assert resolve_backbone("default") == str(tmp_path / "tuned")
    assert resolve_backbone("default-base") == str(tmp_path / "base")
    assert resolve_backbone(tmp_path / "some-folder") == str(tmp_path / "some-folder")

    def broken_merge():
        from jupiter.default_model import ModelError
        raise ModelError("adapter file missing")

    monkeypatch.setattr("jupiter.default_model.ensure_finetuned_default_model", broken_merge)
    with pytest.raises(ModelLoadError, match="backbone default.*adapter file missing"):
        resolve_backbone("default")
