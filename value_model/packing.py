"""Tree packing: the paths of one tree as one sequence, each token computed once however many paths share it.

Why: a node's path is its ancestors' path plus its own turn, so per-path training and scoring recompute the
shared beginnings once per descendant (in a 17-node tree of the README demo the tree holds 16 % of the tokens
that per-path training reads). Packed, the token sequences of all paths become one trie laid out in
depth-first order; each token attends to itself and its ancestors only (an ancestors-only mask), and sits at the
position it has in its own path (per-path position ids), so every token's hidden state is the one it has in any
path through it. A path's value is the head over the mean of its own tokens' hidden states, as the paper pools
(``ValueModel.forward_packed``).

Gemma 3's sliding-window layers see, in a path, only the last ``sliding_window`` positions; their mask is the
ancestors-only mask restricted to position distances below the window. Both masks go to the model as the dict
of per-layer-type masks that transformers' Gemma 3 takes (``{"full_attention": ..., "sliding_attention": ...}``),
its documented way to pass masks it would otherwise build itself.

Paths cut by the token budget (``value_model.truncate``) no longer begin with their ancestors' tokens: they go
per path, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["PackedTree", "pack_sequences"]


@dataclass(frozen=True)
class PackedTree:
    """Token sequences packed as a trie.

    Attributes:
        input_ids: (1, L) the trie's tokens in depth-first order (a parent before its children).
        position_ids: (1, L) each token's position in its own path (its depth in the trie).
        parents: (L,) each token's parent in the packed sequence, -1 at a path's first token.
        ends: (n,) for each input sequence, the packed index of its last token.
        lengths: (n,) each input sequence's length.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    parents: torch.Tensor
    ends: torch.Tensor
    lengths: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PackedTree:
        """The tokens and positions on ``device`` (what the model reads); the trie bookkeeping (parents, ends,
        lengths) stays on the CPU, where the masks and pooling weights are built. The signature of
        ``Tensor.to``, so that a data loader moving a batch to the device moves a pack too."""
        return PackedTree(self.input_ids.to(device, non_blocking=non_blocking),
                          self.position_ids.to(device, non_blocking=non_blocking), self.parents, self.ends,
                          self.lengths)

    @property
    def tokens(self) -> int:
        """Tokens computed for the tree (against ``int(lengths.sum())`` per path)."""
        return int(self.input_ids.shape[1])

    def ancestors(self) -> torch.Tensor:
        """(L, L) bool: ``[i, j]`` when token ``j`` is token ``i`` or one of its ancestors."""
        size = self.tokens
        out = torch.zeros((size, size), dtype=torch.bool)
        parents = self.parents.tolist()
        for i, parent in enumerate(parents):  # parents come first: copy the parent's row, add oneself
            if parent >= 0:
                out[i] = out[parent]
            out[i, i] = True
        return out

    def attention_masks(self, sliding_window: int | None, dtype: torch.dtype | None = None,
                        device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """The per-layer-type masks, (1, 1, L, L): bool (True: attend) for SDPA and flex attention, or, with a
        floating ``dtype`` (eager attention), 0 where a token attends and the dtype's minimum elsewhere."""
        full = self.ancestors()
        masks = {"full_attention": full}
        if sliding_window is not None:
            positions = self.position_ids[0]
            near = (positions.unsqueeze(1) - positions.unsqueeze(0)) < sliding_window
            masks["sliding_attention"] = full & near
        out = {}
        for name, mask in masks.items():
            mask = mask.view(1, 1, *mask.shape).to(device)
            if dtype is not None and dtype.is_floating_point:
                mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(~mask, torch.finfo(dtype).min)
            out[name] = mask
        return out

    def pool_weights(self) -> torch.Tensor:
        """(n, L) fp32: row s averages the hidden states of sequence s's own tokens (its path)."""
        paths = self.ancestors()[self.ends]
        return paths.to(torch.float32) / self.lengths.to(torch.float32).unsqueeze(1)


def pack_sequences(sequences: Sequence[Sequence[int]]) -> PackedTree:
    """Pack token sequences into one trie (shared beginnings once). Sequences need not be distinct; an empty
    one is an error."""
    if any(len(s) == 0 for s in sequences):
        raise ValueError("pack_sequences: every sequence needs at least one token")
    children: list[dict[int, int]] = [{}]  # trie node -> {token: child node}; node 0 is the empty root
    tokens: list[int] = [-1]
    parent_node: list[int] = [-1]
    ends = []
    for sequence in sequences:
        node = 0
        for token in sequence:
            token = int(token)
            nxt = children[node].get(token)
            if nxt is None:
                nxt = len(tokens)
                children[node][token] = nxt
                children.append({})
                tokens.append(token)
                parent_node.append(node)
            node = nxt
        ends.append(node)
    # depth-first order, so that every token comes after its parent and a subtree is contiguous
    order: list[int] = []
    depth = [0] * len(tokens)
    stack = list(reversed(children[0].values()))
    while stack:
        node = stack.pop()
        order.append(node)
        for child in reversed(list(children[node].values())):
            depth[child] = depth[node] + 1
            stack.append(child)
    index = {node: i for i, node in enumerate(order)}
    parents = [index[parent_node[n]] if parent_node[n] > 0 else -1 for n in order]
    return PackedTree(
        input_ids=torch.tensor([[tokens[n] for n in order]], dtype=torch.long),
        position_ids=torch.tensor([[depth[n] for n in order]], dtype=torch.long),
        parents=torch.tensor(parents, dtype=torch.long),
        ends=torch.tensor([index[e] for e in ends], dtype=torch.long),
        lengths=torch.tensor([len(s) for s in sequences], dtype=torch.long),
    )
