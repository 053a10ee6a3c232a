"""Exact top-k / top-p (nucleus) filtering of logits without sorting the whole vocabulary.

Why: the engines' own top-p sorts every row's full vocabulary at every decoding step (vLLM's
``apply_top_k_top_p_pytorch`` on CPU, transformers' ``TopPLogitsWarper``). Gemma 3 has 262,144 tokens; on a
2-core CPU that sort was two thirds of a decoding step at the bench's batch (docs/llm.md, "Sampling"). The
nucleus of a real distribution holds a handful to a few hundred tokens, so it almost always lies among the
row's top few dozen tokens, which ``torch.topk`` finds in one pass.

Method (the idea of vLLM PR #48913: a top-1,024 window with an exact full-vocabulary logsumexp and a sort
fallback, which that PR gives the GPU's small-batch path only, "CPU behaviour unchanged"; PR #32234, top-k
before the sort, was closed). Per row:

1. ``values = topk(row, w)`` (descending) and the row's logsumexp over the whole vocabulary, so the window's
   probabilities are exact, not renormalised to the window;
2. keep the smallest prefix of ``values`` whose probability mass reaches ``top_p``; its last value is the
   row's *cut-off logit*;
3. a row whose window holds less than ``top_p`` of the mass takes the next, wider window (``WINDOWS``:
   64, 1,024, 16,384 tokens), and past the last one the full sort;
4. every logit below the cut-off becomes ``-inf`` in place (no copy of the logits).

The kept set is the one the sort-based definition gives (the tokens in descending order of probability, up
to and including the first at which the mass reaches ``top_p``), with one rule for ties, which a sort leaves
to chance: a token whose logit equals the cut-off is kept, so the set is a function of the logits alone.
``top_k`` keeps the ``k`` largest logits (ties with the ``k``-th included, as vLLM's top-k does); with both,
``top_p`` applies to the distribution renormalised over the top-k set, as in vLLM and transformers.

``reference_keep_mask`` is the plain full-sort definition in float64; the tests hold the filter to it exactly,
and to the engines' own paths on real logits of the embedded model
(``tests/llm/test_nucleus_filter_exactness.py``).
"""

from __future__ import annotations

import torch

__all__ = ["WINDOWS", "filter_top_k_top_p_", "reference_keep_mask"]

#: The windows tried in turn (tokens per row) before the full sort. On real logits of the default model (a task
#: turn), the top-p 0.95 nucleus fits 64 tokens in 98.5 % of rows at T 0.7 and 89 % at T 1.0, and 1,024 tokens
#: (the one window of vLLM PR #48913) in all but 2 % at T 1.0; ``topk`` of 16,384 costs a row about 1.4 ms
#: on a 2-core CPU, its full sort 10 ms.
WINDOWS = (64, 1024, 16384)

_NEG_INF = float("-inf")


def filter_top_k_top_p_(
    logits: torch.Tensor,
    top_p: torch.Tensor | float | None = None,
    top_k: torch.Tensor | int | None = None,
    windows: tuple[int, ...] = WINDOWS,
) -> torch.Tensor:
    """Set to ``-inf``, in place, every logit outside its row's top-k and nucleus set; returns ``logits``.

    Args:
        logits: (rows, vocab) floating-point scores, already divided by the temperature.
        top_p: nucleus mass per row, (rows,) or one float; a value >= 1 (or None) leaves the row's nucleus off.
        top_k: tokens to keep per row, (rows,) or one int; 0, a value >= vocab (or None) leaves top-k off.
        windows: the widths of the windows tried in turn, narrowest first; a row that none settles gets the full
            sort. The first (64) settles most rows of real text: the nucleus of a real distribution at T 0.7 is
            a handful of tokens.

    Rows with neither filter on are not touched. The work per filtered row: a ``topk`` of the first width,
    the row's exp-sum (only when top-k is off: with top-k on, the mass is over the top-k set), and the mask,
    written as a fill of ``-inf`` and a scatter of the kept values where the kept set lies inside the first
    window; rows it cannot settle take a wider ``topk``, then the full sort.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (rows, vocab), got shape {tuple(logits.shape)}")
    if not windows or min(windows) < 1:
        raise ValueError(f"windows must be one or more widths >= 1, got {windows}")
    rows, vocab = logits.shape
    p = _per_row(top_p, rows, torch.float64, 1.0, logits.device)
    k = _per_row(top_k, rows, torch.int64, 0, logits.device)
    k = torch.where((k <= 0) | (k >= vocab), torch.zeros_like(k), k)  # 0: top-k off
    active = (p < 1.0) | (k > 0)
    if not bool(active.any()):
        return logits
    index = active.nonzero().squeeze(1)
    everything = index.numel() == rows
    sub = logits if everything else logits[index]
    p, k = p[index], k[index]
    largest_k = int(k.max())
    widths = sorted({min(vocab, max(w, largest_k)) for w in windows} | {vocab})
    values, indices = torch.topk(sub, widths[0], dim=1, sorted=True)
    total = _logsumexp(sub, values[:, 0]) if bool(((p < 1.0) & (k == 0)).any()) else None
    cutoff, undecided = _cutoffs(values.double(), p, k, total, full=widths[0] == vocab)
    for width in widths[1:]:  # wider windows for the rows the last one could not settle; the last: a full sort
        if not bool(undecided.any()):
            break
        again = undecided.nonzero().squeeze(1)
        if width == vocab:
            wide = torch.sort(sub[again], dim=1, descending=True).values.double()
        else:
            wide = torch.topk(sub[again], width, dim=1, sorted=True).values.double()
        cutoff[again], undecided[again] = _cutoffs(wide, p[again], k[again],
                                                   None if total is None else total[again], full=width == vocab)
    _mask_below_(sub, cutoff, values, indices)
    if not everything:
        logits[index] = sub
    return logits


def _cutoffs(values: torch.Tensor, p: torch.Tensor, k: torch.Tensor, total: torch.Tensor | None,
             full: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The cut-off logit of each row (float64: keep a token iff its logit >= it) and the rows the window
    cannot settle.

    ``values``: (rows, window) float64, descending; ``total``: each row's logsumexp over the whole vocabulary
    (needed for rows with top-p and no top-k); ``full``: the window is the whole vocabulary (a full sort).
    """
    device = values.device
    rows = values.shape[0]
    cutoff = torch.full((rows,), _NEG_INF, dtype=torch.float64, device=device)
    undecided = torch.zeros(rows, dtype=torch.bool, device=device)
    has_k = k > 0
    if bool(has_k.any()):
        kth = values.gather(1, (k.clamp(min=1, max=values.shape[1]) - 1).unsqueeze(1)).squeeze(1)
        cutoff = torch.where(has_k, kth, cutoff)
        if not full:  # ties with the k-th value that run to the window's edge may continue past it
            undecided |= has_k & (values[:, -1] >= kth)
    has_p = p < 1.0
    if bool(has_p.any()):
        in_set = values >= cutoff.unsqueeze(1)  # the top-k set (the whole window when top-k is off)
        # with top-k on, the mass is the distribution renormalised over the top-k set (inside the window); in a
        # full sort the whole row is at hand in float64; else the vocabulary's total comes from ``total``
        mass_total = torch.logsumexp(values.masked_fill(~in_set, _NEG_INF), dim=1)
        if not full and total is not None:
            mass_total = torch.where(has_k, mass_total, total)
        probs = torch.exp(values - mass_total.unsqueeze(1)).masked_fill(~in_set, 0.0)
        mass = probs.cumsum(dim=1)
        # first position whose cumulated mass reaches p; == window when the window holds less than p
        reach = (mass < p.unsqueeze(1)).sum(dim=1)
        if not full:
            undecided |= has_p & ~has_k & (reach >= values.shape[1])
        nucleus = values.gather(1, reach.clamp(max=values.shape[1] - 1).unsqueeze(1)).squeeze(1)
        cutoff = torch.where(has_p, torch.maximum(cutoff, nucleus), cutoff)
    return cutoff, undecided


def _logsumexp(rows: torch.Tensor, row_max: torch.Tensor, chunk: int = 4) -> torch.Tensor:
    """Each row's logsumexp over the whole vocabulary, float32 arithmetic, as float64 (rows,).

    Written out rather than ``torch.logsumexp``, which took 25 ms for 60 × 262,144 float32 on a 2-core CPU
    against 7 ms here: a few rows at a time through one small buffer, instead of a temporary as large as the
    logits (whose first touch costs more than the arithmetic), and no subnormal results (below). Its relative error,
    about 1e-7, moves the cut only where the mass lands within that of ``p``.
    """
    out = torch.empty(rows.shape[0], dtype=torch.float64, device=rows.device)
    shift = row_max.float().unsqueeze(1)
    buffer = torch.empty((min(chunk, rows.shape[0]), rows.shape[1]), dtype=torch.float32, device=rows.device)
    for start in range(0, rows.shape[0], chunk):
        stop = min(start + chunk, rows.shape[0])
        part = buffer[: stop - start]
        torch.sub(rows[start:stop], shift[start:stop], out=part)
        # exp below -87 gives subnormal floats, which x86 CPUs compute many times slower (the exp-sum of real
        # logits took 21 ms instead of 5); clamped, a token adds at most e^-80 where it added less, a relative
        # error of at most 262,144 * e^-80 ~ 5e-30 in the sum
        part.clamp_(min=-80.0).exp_()
        out[start:stop] = part.sum(dim=1, dtype=torch.float64)
    return out.log_() + row_max.double()


def _mask_below_(rows: torch.Tensor, cutoff: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> None:
    """``rows[rows < cutoff] = -inf`` per row, in place.

    Where a row's kept set lies inside the first window (its cut-off above the window's last value), the row
    is filled with ``-inf`` and the kept window values are scattered back: a write-only pass, about a fifth of
    the time of ``masked_fill_`` with its comparison. Other rows take ``masked_fill_``.
    """
    cut = cutoff.to(rows.dtype)
    inside = cut > values[:, -1] if values.shape[1] < rows.shape[1] else torch.ones_like(cut, dtype=torch.bool)
    if bool(inside.all()):
        kept = values.masked_fill(values < cut.unsqueeze(1), _NEG_INF)
        rows.fill_(_NEG_INF)
        rows.scatter_(1, indices, kept)
        return
    if bool(inside.any()):
        outside = (~inside).nonzero().squeeze(1)
        saved = rows[outside]
        kept = values.masked_fill(values < cut.unsqueeze(1), _NEG_INF)
        rows.fill_(_NEG_INF)
        rows.scatter_(1, indices, kept)
        rows[outside] = saved.masked_fill_(saved < cut[outside].unsqueeze(1), _NEG_INF)
        return
    rows.masked_fill_(rows < cut.unsqueeze(1), _NEG_INF)


def _per_row(value: torch.Tensor | float | int | None, rows: int, dtype: torch.dtype, off: float,
             device: torch.device | str = "cpu") -> torch.Tensor:
    if value is None:
        return torch.full((rows,), off, dtype=dtype, device=device)
    if isinstance(value, torch.Tensor):
        out = value.reshape(-1).to(device, dtype)
        if out.numel() == 1:
            return out.expand(rows).clone()
        if out.numel() != rows:
            raise ValueError(f"expected {rows} per-row values, got {out.numel()}")
        return out
    return torch.full((rows,), value, dtype=dtype, device=device)


def reference_keep_mask(
    logits: torch.Tensor, top_p: float | torch.Tensor | None = None, top_k: int | torch.Tensor | None = None
) -> torch.Tensor:
    """The full-sort definition, in float64, as a (rows, vocab) bool mask of kept tokens (for tests and checks).

    Per row: sort descending; top-k keeps the first ``k`` and every token tied with the ``k``-th; top-p keeps,
    over the distribution renormalised on what top-k kept, the shortest prefix whose mass reaches ``p`` and
    every token tied with its last. Slow (a full sort per row); never on a hot path.
    """
    rows, vocab = logits.shape
    p = _per_row(top_p, rows, torch.float64, 1.0)
    k = _per_row(top_k, rows, torch.int64, 0)
    keep = torch.ones((rows, vocab), dtype=torch.bool)
    for r in range(rows):
        row = logits[r].double()
        ordered = torch.sort(row, descending=True).values
        cut = float("-inf")
        if 0 < int(k[r]) < vocab:
            cut = float(ordered[int(k[r]) - 1])
        if float(p[r]) < 1.0:
            kept = ordered[ordered >= cut]
            mass = torch.softmax(kept, dim=0).cumsum(dim=0)
            reach = min(int((mass < float(p[r])).sum()), kept.numel() - 1)  # first j whose mass reaches p
            cut = max(cut, float(kept[reach]))
        keep[r] = row >= cut
    return keep
