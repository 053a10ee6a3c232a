"""Windowed top-k / top-p keeps exactly the tokens of the full-sort definition, and of the engines' own paths.

The kept set is compared with ``reference_keep_mask`` (full sort, float64) on constructed logits that probe
the edges (ties at the cut-off, p = 1, a tiny p, a flat row that forces the fallback, top-k with and without
top-p, mixed rows) and on real next-token logits of the embedded model at temperatures 0.2, 0.7 and 1.0; and
with transformers' ``TopPLogitsWarper`` / ``TopKLogitsWarper`` and vLLM's ``apply_top_k_top_p_pytorch`` on
those real logits, value for value. The processor for vLLM is driven through the v1 interface's own
``BatchUpdate`` calls, as the engine drives it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from jupiter.llm.nucleus import filter_top_k_top_p_, reference_keep_mask  # noqa: E402

NEG_INF = float("-inf")
TEMPERATURES = (0.2, 0.7, 1.0)


def _kept(logits: torch.Tensor, **kwargs) -> torch.Tensor:
    return filter_top_k_top_p_(logits.clone(), **kwargs) > NEG_INF


@pytest.fixture(scope="module")
def real_logits() -> torch.Tensor:
    """(32, 262144) float32 next-token logits of the fine-tuned default at 32 positions of a real task turn
    and reply (the notebook format the search sends)."""
    transformers = pytest.importorskip("transformers")
    from jupiter.default_model import ensure_finetuned_default_model
    from jupiter.llm.rendering import render_for_tokenizer
    from jupiter.prompts import build_messages
    from jupiter.task import load_task_file
    from tests.conftest import REPO

    folder = ensure_finetuned_default_model()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    messages = build_messages(load_task_file(REPO / "jupiter/examples/titanic_mean_fare.json"))
    messages.append({"role": "assistant", "content": "Thought: load the data and look at the columns first.\n"
                     "```python\nimport pandas as pd\ndf = pd.read_csv('test_ave.csv')\nprint(df.columns)\n```"})
    text = render_for_tokenizer(messages, tokenizer, None)  # what the backends send
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = model(ids).logits[0].float()
    positions = torch.linspace(ids.shape[1] - 96, ids.shape[1] - 1, 32).long()
    return logits[positions].contiguous()


# --- constructed edges ---------------------------------------------------------------------------------------

def test_ties_at_the_cut_off_are_all_kept_as_the_reference_defines():
    logits = torch.full((3, 5000), -30.0)
    logits[:, :4] = 5.0  # four equal tokens hold almost all the mass: p = 0.3 cuts inside the tie
    logits[1, 4000:4004] = 5.0  # the tie spread over the row, far from the front
    logits[2, 10:20] = 2.0
    kept = _kept(logits, top_p=0.3, windows=(8,))
    assert torch.equal(kept, reference_keep_mask(logits, 0.3))
    assert kept[0].sum() == 4 and kept[1].sum() == 8  # every tied token, not the first ones a sort put first


def test_top_p_one_changes_nothing_and_a_tiny_p_keeps_the_most_likely_token():
    logits = torch.randn(4, 3000, generator=torch.Generator().manual_seed(0)) * 4
    assert torch.equal(filter_top_k_top_p_(logits.clone(), top_p=1.0), logits)
    kept = _kept(logits, top_p=1e-9)
    assert torch.equal(kept, reference_keep_mask(logits, 1e-9))
    assert torch.equal(kept.nonzero()[:, 1], logits.argmax(dim=1))


def test_a_flat_row_falls_back_to_the_full_sort_and_stays_exact():
    generator = torch.Generator().manual_seed(1)
    flat = torch.randn(2, 50_000, generator=generator) * 0.05  # the window of 64 holds ~0.1 % of the mass
    peaked = torch.randn(2, 50_000, generator=generator) * 6
    logits = torch.cat([flat, peaked])
    kept = _kept(logits, top_p=0.9, windows=(64,))
    assert torch.equal(kept, reference_keep_mask(logits, 0.9))
    assert (kept[:2].sum(dim=1) > 40_000).all()  # the flat rows keep most of the vocabulary


@pytest.mark.parametrize("top_k", [1, 7, 300])
def test_top_k_alone_and_with_top_p(top_k):
    logits = torch.randn(5, 20_000, generator=torch.Generator().manual_seed(top_k)) * 3
    assert torch.equal(_kept(logits, top_k=top_k, windows=(64,)), reference_keep_mask(logits, top_k=top_k))
    both = _kept(logits, top_p=0.8, top_k=top_k, windows=(64,))
    assert torch.equal(both, reference_keep_mask(logits, 0.8, top_k))
    assert (both.sum(dim=1) <= top_k).all()


def test_rows_with_their_own_settings_and_rows_left_alone():
    logits = torch.randn(4, 10_000, generator=torch.Generator().manual_seed(3)) * 5
    top_p = torch.tensor([0.95, 1.0, 0.5, 1.0])
    top_k = torch.tensor([0, 0, 0, 40])
    out = filter_top_k_top_p_(logits.clone(), top_p, top_k, windows=(128,))
    assert torch.equal(out > NEG_INF, reference_keep_mask(logits, top_p, top_k))
    assert torch.equal(out[1], logits[1])  # neither filter on: untouched
    kept = out > NEG_INF
    assert torch.equal(out[kept], logits[kept])  # kept logits keep their values


def test_bfloat16_logits_are_filtered_in_their_own_dtype():
    logits = (torch.randn(3, 8000, generator=torch.Generator().manual_seed(4)) * 4).bfloat16()
    out = filter_top_k_top_p_(logits.clone(), top_p=0.9)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out > NEG_INF, reference_keep_mask(logits.float(), 0.9))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="rows, vocab"):
        filter_top_k_top_p_(torch.zeros(5), top_p=0.9)
    with pytest.raises(ValueError, match="windows"):
        filter_top_k_top_p_(torch.zeros(2, 5), top_p=0.9, windows=(0,))
    with pytest.raises(ValueError, match="per-row"):
        filter_top_k_top_p_(torch.zeros(2, 5), top_p=torch.tensor([0.9, 0.9, 0.9]))


# --- real logits of the embedded model ------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("top_p", [0.95, 0.5])
def test_real_logits_keep_the_reference_set(real_logits, temperature, top_p):
    scaled = real_logits / temperature
    kept = _kept(scaled, top_p=top_p)
    assert torch.equal(kept, reference_keep_mask(scaled, top_p))
    assert torch.equal(_kept(scaled, top_p=top_p, top_k=50), reference_keep_mask(scaled, top_p, 50))


def _assert_equal_but_ties_at_the_cut(ours: torch.Tensor, theirs: torch.Tensor) -> int:
    """The engines' own sorts keep an arbitrary part of a run of equal logits at the cut-off (``torch.sort``
    is not stable on CPU); ours keeps the whole run. Every row is equal value for value, except that such a
    row keeps, beyond the engine's tokens, only tokens equal to the smallest logit both keep. Returns how
    many rows had such a tie."""
    ours_kept, theirs_kept = ours > NEG_INF, theirs > NEG_INF
    assert torch.equal(ours[theirs_kept], theirs[theirs_kept])
    assert not (theirs_kept & ~ours_kept).any()  # never fewer tokens
    ties = 0
    for row in (ours_kept != theirs_kept).any(dim=1).nonzero().squeeze(1).tolist():
        cut = ours[row][ours_kept[row]].min()
        extra = ours_kept[row] & ~theirs_kept[row]
        assert (ours[row][extra] == cut).all() and theirs[row][theirs_kept[row]].min() == cut
        ties += 1
    return ties


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_real_logits_equal_transformers_own_warpers(real_logits, temperature):
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from jupiter.llm.hf_local import WindowedTopKTopP

    ids = torch.zeros((real_logits.shape[0], 1), dtype=torch.long)
    scaled = TemperatureLogitsWarper(temperature)(ids, real_logits.clone())
    theirs = TopPLogitsWarper(0.95)(ids, scaled.clone())
    _assert_equal_but_ties_at_the_cut(WindowedTopKTopP(0.95)(ids, scaled.clone()), theirs)
    theirs = TopPLogitsWarper(0.9)(ids, TopKLogitsWarper(20)(ids, scaled.clone()))
    _assert_equal_but_ties_at_the_cut(WindowedTopKTopP(0.9, 20)(ids, scaled.clone()), theirs)


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_real_logits_equal_vllms_own_sort(real_logits, temperature):
    pytest.importorskip("vllm")
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    scaled = real_logits / temperature
    rows = scaled.shape[0]
    p = torch.full((rows,), 0.95)
    theirs = apply_top_k_top_p_pytorch(scaled.clone(), None, p, allow_cpu_sync=True)
    _assert_equal_but_ties_at_the_cut(filter_top_k_top_p_(scaled.clone(), p), theirs)
    k = torch.full((rows,), 30, dtype=torch.int32)
    theirs = apply_top_k_top_p_pytorch(scaled.clone(), k, p, allow_cpu_sync=True)
    _assert_equal_but_ties_at_the_cut(filter_top_k_top_p_(scaled.clone(), p, k), theirs)


def test_the_vllm_processor_follows_the_engines_batch_updates(real_logits):
    """Requests join, leave and move in vLLM's persistent batch; each row keeps its own top-p."""
    pytest.importorskip("vllm")
    from vllm import SamplingParams as VllmParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    from jupiter.llm.vllm_nucleus import WindowedTopKTopP, extra_args

    def request(p: float, k: int = 0) -> VllmParams:
        return VllmParams(top_p=1.0, extra_args=extra_args(p, k))

    processor = WindowedTopKTopP(None, torch.device("cpu"), False)
    assert processor.is_argmax_invariant()
    processor.update_state(BatchUpdate(batch_size=3, removed=[], moved=[], added=[
        (0, request(0.95), [1], []), (1, VllmParams(), [1], []), (2, request(0.5, 10), [1], [])]))
    logits = real_logits[:3] / 0.7
    expected = torch.stack([
        apply_top_k_top_p_pytorch(logits[0:1].clone(), None, torch.tensor([0.95]), allow_cpu_sync=True)[0],
        logits[1],
        apply_top_k_top_p_pytorch(logits[2:3].clone(), torch.tensor([10]), torch.tensor([0.5]),
                                  allow_cpu_sync=True)[0],
    ])
    _assert_equal_but_ties_at_the_cut(processor.apply(logits.clone()), expected)
    # request 0 leaves, request 2 moves into its place: two rows, the second one untouched
    processor.update_state(BatchUpdate(batch_size=2, removed=[0], added=[],
                                       moved=[(2, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    moved = torch.stack([logits[2], logits[1]])
    out = processor.apply(moved.clone())
    assert torch.equal(out[0], filter_top_k_top_p_(logits[2:3].clone(), 0.5, 10)[0])
    assert torch.equal(out[1], logits[1])
    assert processor.calls == 2 and processor.seconds > 0
    with pytest.raises(ValueError, match="top_p"):
        WindowedTopKTopP.validate_params(VllmParams(extra_args={"jupiter_nucleus": [1.5, 0]}))
