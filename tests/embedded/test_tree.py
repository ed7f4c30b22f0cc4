"""Draft trees: SGLang's selection of candidates, the tree mask, greedy tree verification."""

from __future__ import annotations

import torch

from perfgate.engines.embedded.tree import (
    Candidates,
    build_tree,
    capacity,
    chain_tree,
    first_child_path,
    tree_attention,
    verify_greedy,
)

# Two levels, two branches: first tokens 10 (p .6) and 20 (p .3); the children of 10 are 11
# (.5) and 12 (.4), those of 20 are 21 (.9) and 22 (.1). Scores multiply along the path.
CANDIDATES = Candidates(
    tokens=torch.tensor([[10, 20, 11, 12, 21, 22]]),
    scores=torch.tensor([[0.6, 0.3, 0.3, 0.24, 0.27, 0.03]]),
    parents=torch.tensor([[-1, -1, 0, 0, 1, 1]]),
)
ROOT = torch.tensor([7])


def test_capacity_counts_the_root_and_every_candidate() -> None:
    assert capacity(3, 4) == 1 + 4 + 2 * 16
    assert capacity(5, 1) == 6


def test_the_best_candidates_are_kept_with_their_parents_first() -> None:
    # 20 and 11 tie at .3; the earlier candidate wins a tie, so a parent always precedes its
    # children and a kept child's parent is kept.
    tree = build_tree(ROOT, CANDIDATES, num_draft_tokens=5, levels=3)
    assert tree.tokens.tolist() == [[7, 10, 20, 11, 21]]
    assert tree.parents.tolist() == [[0, 0, 0, 1, 2]]
    assert tree.depths.tolist() == [[0, 1, 1, 2, 2]]
    assert tree.ancestors[0].int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 0, 1, 0, 1],
    ]


def test_a_chain_is_a_tree_of_one_branch() -> None:
    tree = chain_tree(ROOT, torch.tensor([[1, 2, 3]]))
    assert tree.parents.tolist() == [[0, 0, 1, 2]]
    assert tree.depths.tolist() == [[0, 1, 2, 3]]
    assert torch.equal(tree.ancestors[0], torch.ones(4, 4, dtype=torch.bool).tril())


def test_tree_nodes_see_the_prefix_and_their_ancestors() -> None:
    tree = build_tree(ROOT, CANDIDATES, num_draft_tokens=5, levels=3)
    positions, view = tree_attention(tree, torch.tensor([5]), kv_len=16)
    assert view.slots.tolist() == [[5, 6, 7, 8, 9]]
    assert positions.tolist() == [[5, 6, 6, 7, 7]]
    seen = [torch.nonzero(row).flatten().tolist() for row in view.mask[0, 0]]
    prefix = [0, 1, 2, 3, 4]
    assert seen == [
        [*prefix, 5],
        [*prefix, 5, 6],
        [*prefix, 5, 7],
        [*prefix, 5, 6, 8],
        [*prefix, 5, 7, 9],
    ]


def test_verification_follows_the_targets_branch() -> None:
    tree = build_tree(ROOT, CANDIDATES, num_draft_tokens=5, levels=3)
    # The target wants 20 after the root (the draft's second choice), then 21, then 33.
    target_next = torch.tensor([[20, 11, 21, 99, 33]])
    accepted = verify_greedy(tree, target_next, path_len=3)
    assert accepted.num_correct.tolist() == [2]
    assert accepted.path.tolist() == [[0, 2, 4]]
    assert accepted.committed.tolist() == [[20, 21, 33]]


def test_a_miss_at_the_first_level_commits_the_bonus_only() -> None:
    tree = build_tree(ROOT, CANDIDATES, num_draft_tokens=5, levels=3)
    accepted = verify_greedy(tree, torch.tensor([[42, 11, 21, 99, 33]]), path_len=3)
    assert accepted.num_correct.tolist() == [0]
    assert accepted.committed[:, :1].tolist() == [[42]]


def test_chains_accept_their_longest_correct_prefix() -> None:
    tree = chain_tree(torch.tensor([7, 7]), torch.tensor([[1, 2, 3], [1, 2, 3]]))
    target_next = torch.tensor([[1, 2, 9, 9], [1, 2, 3, 4]])
    accepted = verify_greedy(tree, target_next, path_len=4)
    assert accepted.num_correct.tolist() == [2, 3]
    assert accepted.committed[0, :3].tolist() == [1, 2, 9]
    assert accepted.committed[1].tolist() == [1, 2, 3, 4]


def test_the_first_child_path_takes_the_drafts_first_choices() -> None:
    tree = build_tree(ROOT, CANDIDATES, num_draft_tokens=5, levels=3)
    assert first_child_path(tree, 3).tolist() == [[True, True, False, True, False]]


def test_a_chain_verifies_with_plain_causal_attention() -> None:
    tree = chain_tree(torch.tensor([7, 7]), torch.tensor([[1, 2], [3, 4]]))
    lengths = torch.tensor([5, 9])
    positions, causal = tree_attention(tree, lengths, kv_len=16, chain=True)
    _, general = tree_attention(tree, lengths, kv_len=16)
    assert torch.equal(causal.slots, general.slots) and torch.equal(positions, causal.slots)
    assert torch.equal(causal.mask, general.mask)
