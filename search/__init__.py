"""Tree search over notebook states: PUCT selection, batched expansion, evaluation, back-up and decision.

    from search import SearchConfig, Mode, run_search
    result = run_search(task, policy, sandbox, SearchConfig(mode=Mode.INFER), value=None, seed=0)
    result.answer, result.vote_table, result.value_answer, result.candidates, result.tree, result.stats

``search.driver.solve_many`` runs many trees with one batched policy call per step; ``search.tree_io`` reads
and writes tree files (ours and the paper's). Inside: ``search.step`` is the step of one tree as pure functions
(select, expand, evaluate, back up), ``search.executor`` its I/O (policy, cells, value model, sandboxes, the
node -> state map), ``search.driver`` the loop over many trees.
"""

from search.baselines import config_for_mode, react_config, vote_config
from search.config import ConfigError, Decision, Mode, SearchConfig, VoteKey
from search.decide import Candidate, VoteEntry
from search.driver import DriverStep, run_search, solve_many
from search.protocols import PolicyLike, SandboxLike, StateLike, Value
from search.result import SearchResult, SearchStats
from search.tree import Node, NodeStatus, TerminalReason, Tree
from search.tree_io import TreeFileError, load_tree, save_tree

__all__ = [
    "Mode",
    "Decision",
    "VoteKey",
    "SearchConfig",
    "ConfigError",
    "run_search",
    "solve_many",
    "DriverStep",
    "SearchResult",
    "SearchStats",
    "Candidate",
    "VoteEntry",
    "Node",
    "NodeStatus",
    "TerminalReason",
    "Tree",
    "save_tree",
    "load_tree",
    "TreeFileError",
    "react_config",
    "vote_config",
    "config_for_mode",
    "PolicyLike",
    "SandboxLike",
    "StateLike",
    "Value",
]
