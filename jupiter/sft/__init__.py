"""``jupiter sft``: LoRA fine-tuning of the policy on ShareGPT SFT data (see docs/sft.md).

Modules: ``config`` (settings and profiles), ``data`` (ShareGPT rows → token ids and labels, rendered as the
backends render prompts), ``train`` (the Trainer run, checkpoints, ``training.json``), ``merge`` (adapter →
merged Hugging Face folder). Importing this package imports no torch; the functions that need it do so.
"""

from jupiter.sft.config import DEFAULT_PROFILE, PROFILES, SftConfig, SftConfigError, profile
from jupiter.sft.data import SftDataError

__all__ = ["DEFAULT_PROFILE", "PROFILES", "SftConfig", "SftConfigError", "SftDataError", "profile"]
