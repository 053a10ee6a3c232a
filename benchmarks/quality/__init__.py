"""Search-quality benchmark: does the tree search beat ReAct and majority voting on DABench questions?

A simulated noisy policy (``sim_policy``) samples steps of verified reference solutions (``solutions.json``,
``solutions``, ``verify``); every mode runs through the real engine and sandbox (``runs``); the value-model arm
collects, extracts, trains and infers (``value_arm``); ``search_vs_baselines.py --json`` prints the report.
"""

__all__ = ["solutions", "sim_policy", "verify", "runs"]
