"""Draft trees: SGLang's selection of draft tokens, the tree attention mask, greedy verification.

A draft of ``num_steps`` levels with ``topk`` branches proposes candidates level by level: the
``topk`` most likely first tokens, then, for each of the ``topk`` best paths so far (the
*beams*), its ``topk`` most likely children, ``topk`` squared candidates per level. A
candidate's score is the product of the draft's probabilities along its path. Of all the
candidates, the best ``num_draft_tokens - 1`` by score are verified, as SGLang's
``organize_draft_results`` keeps them, under a root: the last committed token.

Node 0 of a tree is the root; nodes 1..N-1 are the kept candidates in the order they were
proposed, so a parent always comes before its children. A chain (``topk == 1``) is the tree
whose node ``i`` has parent ``i - 1``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from perfgate.engines.embedded.model import AttentionView, causal_view


class DraftTree(NamedTuple):
    tokens: Tensor  # [B, N]: node 0 is the root, the last committed token
    parents: Tensor  # [B, N]: parent node of each node; the root is its own parent
    ancestors: Tensor  # [B, N, N] bool: [b, i, j] is whether node j is node i or its ancestor
    depths: Tensor  # [B, N]: the root is at depth 0

    @property
    def size(self) -> int:
        return self.tokens.shape[1]


class Candidates(NamedTuple):
    """Every draft candidate of a batch, level by level."""

    tokens: Tensor  # [B, M]
    scores: Tensor  # [B, M] float: product of the draft's probabilities along the path
    parents: Tensor  # [B, M]: candidate index of the parent; -1 for the root


def capacity(num_steps: int, topk: int) -> int:
    """Return the most tokens a tree of num_steps levels and topk branches can verify."""
    return 1 + topk + (num_steps - 1) * topk * topk


def build_tree(
    root: Tensor, candidates: Candidates, num_draft_tokens: int, levels: int
) -> DraftTree:
    """Keep the best num_draft_tokens - 1 candidates under root [B]; return the tree.

    The sort is stable and a parent's score is at least its child's, with the parent first, so a
    kept candidate's parent is always kept too: the nodes form a tree.
    """
    keep = num_draft_tokens - 1
    order = torch.sort(candidates.scores, dim=1, descending=True, stable=True).indices
    kept = order[:, :keep].sort(dim=1).values  # [B, keep]: back in proposal order
    tokens = torch.cat([root.unsqueeze(1), candidates.tokens.gather(1, kept)], dim=1)
    # Map a candidate to its node (1 + its rank among the kept); the root (-1) to node 0.
    batch, count = candidates.tokens.shape
    node_of = torch.zeros(batch, count + 1, dtype=torch.long, device=root.device)
    ranks = torch.arange(1, keep + 1, device=root.device).expand(batch, -1)
    node_of.scatter_(1, kept + 1, ranks)
    parents = node_of.gather(1, candidates.parents.gather(1, kept) + 1)
    parents = torch.cat([torch.zeros_like(root).unsqueeze(1), parents], dim=1)
    return tree_from_parents(tokens, parents, levels)


def chain_tree(root: Tensor, drafts: Tensor) -> DraftTree:
    """Return the chain of root [B] and drafts [B, S] as a tree."""
    tokens = torch.cat([root.unsqueeze(1), drafts], dim=1)
    batch, count = tokens.shape
    steps = torch.arange(count, device=root.device)
    parents = (steps - 1).clamp(min=0).expand(batch, -1)
    ancestors = torch.ones(count, count, dtype=torch.bool, device=root.device).tril()
    return DraftTree(tokens, parents, ancestors.expand(batch, -1, -1), steps.expand(batch, -1))


def tree_from_parents(tokens: Tensor, parents: Tensor, levels: int) -> DraftTree:
    """Complete a tree of at most `levels` levels from its tokens and parent links [B, N]."""
    batch, count = tokens.shape
    ancestors = torch.zeros(batch, count, count, dtype=torch.bool, device=tokens.device)
    node = torch.arange(count, device=tokens.device).expand(batch, -1)
    for _ in range(levels):  # walk every node up to the root, marking what it passes
        ancestors.scatter_(2, node.unsqueeze(-1), True)
        node = parents.gather(1, node)
    depths = ancestors.sum(-1) - 1
    return DraftTree(tokens, parents, ancestors, depths)


def tree_attention(
    tree: DraftTree, lengths: Tensor, kv_len: int, chain: bool = False
) -> tuple[Tensor, AttentionView]:
    """Return the positions [B, N] and the attention view of a verify over tree.

    Node i of a sequence whose cache holds `length` tokens is written to slot length + i and
    sits at position length + depth(i); it sees the whole prefix and its own ancestors. A
    chain's node i sits at position length + i, its slot: plain causal attention.
    """
    positions = lengths.unsqueeze(1) + tree.depths
    if chain:
        return positions, causal_view(positions, kv_len)
    slots = lengths.unsqueeze(1) + torch.arange(tree.size, device=lengths.device)
    return positions, AttentionView(slots, prefix_and_nodes_mask(lengths, tree.ancestors, kv_len))


def prefix_and_nodes_mask(base: Tensor, sees: Tensor, kv_len: int) -> Tensor:
    """Return the mask [B, 1, Q, kv_len] of queries that see every slot below base [B] and
    the slots base + j for which sees [B, Q, J] is true."""
    count = sees.shape[2]
    offset = torch.arange(kv_len, device=base.device).unsqueeze(0) - base.unsqueeze(1)
    in_nodes = (offset >= 0) & (offset < count)  # [B, kv_len]
    index = offset.clamp(0, count - 1).unsqueeze(1).expand(-1, sees.shape[1], -1)
    sees_node = sees.gather(2, index) & in_nodes.unsqueeze(1)
    return ((offset < 0).unsqueeze(1) | sees_node).unsqueeze(1)


class TreeAcceptance(NamedTuple):
    path: Tensor  # [B, num_steps + 1]: accepted nodes from the root; valid up to num_correct
    num_correct: Tensor  # [B]: accepted draft tokens (the root excluded)
    committed: Tensor  # [B, num_steps + 1]: tokens to commit; valid up to num_correct + 1


def verify_greedy(tree: DraftTree, target_next: Tensor, path_len: int) -> TreeAcceptance:
    """Accept the longest path of drafts the target agrees with, and its bonus token.

    target_next [B, N] is the target's token after each node (its argmax, or its draw when
    sampling). A node is correct when its token is the target's choice after its parent, and
    accepted when it and every ancestor are correct. Siblings hold distinct tokens, so at most
    one child of an accepted node is accepted: the accepted nodes form one path from the root,
    the longest correct one.
    """
    correct = tree.tokens == target_next.gather(1, tree.parents)
    correct[:, 0] = True  # the root is committed already
    accepted = ~(tree.ancestors & ~correct.unsqueeze(1)).any(-1)  # [B, N]
    return accept_path(tree, accepted, target_next, path_len)


def accept_path(
    tree: DraftTree, accepted: Tensor, target_next: Tensor, path_len: int
) -> TreeAcceptance:
    """Commit the drafts on the accepted path [B, N] (bool), then the target's bonus token."""
    num_correct = accepted.sum(1) - 1
    # Accepted nodes first, in node order, which is depth order along one path.
    path = torch.sort((~accepted).to(torch.uint8), dim=1, stable=True).indices[:, :path_len]
    if path.shape[1] < path_len:  # a tree smaller than the longest chain
        path = torch.cat([path, path[:, -1:].expand(-1, path_len - path.shape[1])], dim=1)
    drafts = tree.tokens.gather(1, path[:, 1:])  # the token of each path node after the root
    bonus = target_next.gather(1, path).gather(1, num_correct.unsqueeze(1))
    committed = torch.cat([drafts, bonus], dim=1).scatter(1, num_correct.unsqueeze(1), bonus)
    return TreeAcceptance(path, num_correct, committed)


def first_child_path(tree: DraftTree, path_len: int) -> Tensor:
    """Return [B, path_len]: the nodes from the root always taking the first child (bool mask).

    Used to simulate acceptance: the path a real draft would most likely get accepted.
    """
    batch, count = tree.tokens.shape
    on_path = torch.zeros(batch, count, dtype=torch.bool, device=tree.tokens.device)
    on_path[:, 0] = True
    node = torch.zeros(batch, dtype=torch.long, device=tree.tokens.device)
    nodes = torch.arange(count, device=node.device)
    for _ in range(path_len - 1):
        is_child = (tree.parents == node.unsqueeze(1)) & (nodes > 0)
        has_child = is_child.any(1)
        child = torch.where(is_child, nodes, count).min(1).values
        node = torch.where(has_child, child, node)
        on_path.scatter_(1, node.unsqueeze(1), True)
    return on_path
