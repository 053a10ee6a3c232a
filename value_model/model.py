"""The value model: a causal-LM backbone with LoRA adapters and a small value head on top.

value(path) = tanh(w · dropout(mean of the backbone's last hidden states over the path's real tokens − c) + b)

(c: a running mean of the pooled features, see ``ValueHead``).

The head is its own module wrapped around the backbone (as TRL's value head is), not a subclass of it, so
any Hugging Face causal LM works and the base weights stay untouched and frozen. Pooling and the head run in
fp32 for numerical stability even when the backbone runs in bf16. Only the decoder stack is called, never
the LM head: logits over a 262k-token vocabulary would cost more memory than the whole forward pass.

On disk (``ValueModel.save``): ``value_config.json`` (``ModelConfig``), ``adapter/`` (peft LoRA adapter,
safetensors) and ``value_head.safetensors``. Loading needs only this module, never the training code.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jupiter.torch_device import DeviceError, check_device
from value_model.config import ConfigError, ModelConfig
from value_model.packing import PackedTree

__all__ = [
    "ValueHead",
    "ValueModel",
    "PrefixState",
    "ModelLoadError",
    "resolve_backbone",
    "load_tokenizer",
    "pick_device",
    "pick_dtype",
    "CONFIG_FILE",
    "HEAD_FILE",
    "ADAPTER_DIR",
]

log = logging.getLogger(__name__)

CONFIG_FILE = "value_config.json"
HEAD_FILE = "value_head.safetensors"
ADAPTER_DIR = "adapter"
FORMAT_VERSION = 1


class ModelLoadError(RuntimeError):
    """A value model or its backbone cannot be loaded; the message names the path."""


def resolve_backbone(name: str | Path) -> str:
    """A backbone argument → a loadable folder, by the same rules as the policy's ``--llm``: ``"default"`` is the
    fine-tuned embedded model (the paper trains the value model on the fine-tuned policy's backbone),
    ``"default-base"`` the base model, an adapter folder is merged into its base once; anything else is returned
    as is."""
    from jupiter.llm.model_dirs import ModelDirError, resolve_model_dir

    try:
        return resolve_model_dir(str(name))
    except ModelDirError as exc:
        raise ModelLoadError(f"value-model backbone {name}: {exc}") from None


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a ``torch.device``; None: the GPU when there is one, else the CPU. A GPU asked for where
    there is none is a ``ModelLoadError`` here (``jupiter.torch_device``), not an assertion deep inside torch
    once the weights load."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(check_device(str(device)))
    except DeviceError as exc:
        raise ModelLoadError(str(exc)) from None


def pick_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPU (fast, and what these backbones are trained in); fp32 on CPU (bf16 matmuls are slow there)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_tokenizer(backbone: str) -> Any:
    """The backbone's tokenizer (pad = eos when it has none). Loaded once per process and backbone path:
    a 262k-token vocabulary takes seconds to parse, and training, scoring and every scorer need the same one.
    The shared object is only ever used to encode (no truncation/padding state is set on it)."""
    return _load_tokenizer(str(backbone))


@functools.lru_cache(maxsize=4)
def _load_tokenizer(backbone: str) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(backbone)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the tokenizer of backbone {backbone!r}: {exc}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class ValueHead(nn.Module):
    """center → dropout → linear(hidden → 1) → tanh, in fp32. Small Gaussian init: an untrained head says ≈ 0.

    Why the centering: mean-pooled hidden states of every path share a large common vector (the system and
    task turns are the same in all paths of a task; on Gemma 3 270M the pooled vector has norm ≈ 70 while
    paths differ by ≈ 0.3 per dimension). With Adam, each step then moves all values together far more than
    it separates them, and short runs oscillate or saturate the tanh. Subtracting a running mean of the
    pooled features (a buffer, not a parameter: updated in training mode, frozen in eval mode, saved with
    the head) removes that common vector and makes the regression well conditioned.
    """

    def __init__(self, hidden_size: int, dropout: float = 0.1, init_std: float = 1e-3,
                 center_momentum: float = 0.05) -> None:
        super().__init__()
        self.center_momentum = center_momentum
        self.register_buffer("center", torch.zeros(hidden_size, dtype=torch.float32))
        self.register_buffer("center_updates", torch.zeros((), dtype=torch.float32))
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.normal_(self.linear.weight, mean=0.0, std=init_std)
        nn.init.zeros_(self.linear.bias)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled: [batch, hidden] → values [batch] in (-1, 1), fp32 (also under a bf16 autocast, as
        ``Trainer`` runs a GPU model: the head and its centering stay in full precision)."""
        with _full_precision(pooled):
            return self._forward(pooled.float())

    def _forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():  # exact mean over the first batches, then an exponential moving average
                rate = max(self.center_momentum, 1.0 / (float(self.center_updates) + 1.0))
                self.center.mul_(1.0 - rate).add_(features.mean(dim=0), alpha=rate)
                self.center_updates.add_(1.0)
        return torch.tanh(self.linear(self.dropout(features - self.center))).squeeze(-1)


def _cache_nbytes(cache: Any) -> int:
    """Bytes of the key and value tensors of a Hugging Face ``Cache`` (its ``layers``, transformers >= 4.56)."""
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
               if t is not None)


def _full_precision(tensor: torch.Tensor) -> Any:
    """Autocast off on ``tensor``'s device: pooling and the head run in fp32 even inside a mixed-precision step."""
    return torch.autocast(device_type=tensor.device.type, enabled=False)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` [B, T, H] over the real tokens (mask 1) → [B, H] in fp32 (padding never counts)."""
    with _full_precision(hidden):
        mask = attention_mask.to(torch.float32).unsqueeze(-1)
        summed = (hidden.to(torch.float32) * mask).sum(dim=1)
        return summed / mask.sum(dim=1).clamp(min=1.0)


@dataclass(frozen=True)
class PrefixState:
    """A path's first ``length`` tokens run through the backbone: their keys and values (a Hugging Face cache,
    batch of one) and the sum of their last hidden states (fp32, [1, H]), which is all the mean pool of a longer
    path needs of them. Made by ``ValueModel.encode_prefix``; never changed after (users copy the cache)."""

    cache: Any
    hidden_sum: torch.Tensor
    length: int
    nbytes: int = 0  # memory of the keys and values (Gemma 3 keeps at most its 512-token window on most layers)


class ValueModel(nn.Module):
    """LoRA-adapted backbone + ``ValueHead``. ``forward(input_ids, attention_mask) -> values [B]`` (fp32)."""

    def __init__(self, lm: nn.Module, peft_model: nn.Module, head: ValueHead, config: ModelConfig) -> None:
        super().__init__()
        self.peft_model = peft_model  # owns the LoRA-injected backbone (registered for .to() / .parameters())
        self.head = head
        self.config = config
        decoder = lm.get_decoder() if hasattr(lm, "get_decoder") else None
        if decoder is None:
            decoder = getattr(lm, "model", None)
        if decoder is None:
            raise ModelLoadError(f"backbone {config.backbone!r}: cannot find its decoder stack")
        self._decoder = [decoder]  # a list: not registered twice as a submodule
        self._lm = [lm]

    @property
    def decoder(self) -> nn.Module:
        return self._decoder[0]

    @property
    def lm(self) -> nn.Module:
        return self._lm[0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return self.head(mean_pool(out.last_hidden_state, attention_mask))

    def forward_packed(self, packed: PackedTree) -> torch.Tensor:
        """Values [n] of the sequences packed in ``packed`` (``value_model.packing``), each token computed once.

        The same numbers as ``forward`` on each path alone: every token attends to its ancestors only, at its
        position in its own path, and a path's value pools its own tokens' hidden states.
        """
        device = packed.input_ids.device
        config = self.lm.config
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        eager = getattr(text_config, "_attn_implementation", None) == "eager"
        masks = packed.attention_masks(getattr(text_config, "sliding_window", None),
                                       dtype=self.lm.dtype if eager else None, device=device)
        if "sliding_attention" not in (getattr(text_config, "layer_types", None) or ()):
            masks = masks["full_attention"]  # a model with one kind of layer takes one mask
        out = self.decoder(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=masks,
                           use_cache=False)
        hidden = out.last_hidden_state[0]
        with _full_precision(hidden):  # a bf16 autocast would run this matmul in bf16
            pooled = packed.pool_weights().to(device) @ hidden.to(torch.float32)
        return self.head(pooled)

    def encode_prefix(self, tokens: torch.Tensor, start: PrefixState | None = None) -> PrefixState:
        """The backbone's keys and values and summed last hidden states for ``tokens`` [L] (batch of one),
        continuing from ``start`` when given (``start.length`` tokens of ``tokens`` already encoded; ``start``
        itself is left as it was). What ``forward_suffixes`` needs to score paths that begin with ``tokens``.
        """
        length = int(tokens.shape[-1])
        done = 0 if start is None else start.length
        if done == length and start is not None:
            return start
        new = tokens[done:].view(1, -1)
        cache = None if start is None else copy.deepcopy(start.cache)
        positions = torch.arange(done, length, device=tokens.device)
        out = self.decoder(input_ids=new, attention_mask=torch.ones((1, length), dtype=torch.long,
                                                                    device=tokens.device),
                           past_key_values=cache, use_cache=True, cache_position=positions,
                           position_ids=positions.unsqueeze(0))
        hidden_sum = out.last_hidden_state.to(torch.float32).sum(dim=1)  # [1, H]
        if start is not None:
            hidden_sum = hidden_sum + start.hidden_sum
        return PrefixState(out.past_key_values, hidden_sum, length, _cache_nbytes(out.past_key_values))

    def value_of(self, state: PrefixState) -> torch.Tensor:
        """The value [1] of the whole path ``state`` encodes: its mean-pooled last hidden states through the head,
        the number ``forward`` gives on that path alone."""
        return self.head(state.hidden_sum / state.length)

    def forward_suffixes(self, prefix: PrefixState, suffixes: torch.Tensor, suffix_mask: torch.Tensor
                         ) -> torch.Tensor:
        """Values of B paths that all start with the tokens ``prefix`` encodes, each followed by its own suffix
        (``suffixes`` [B, S], right-padded; ``suffix_mask`` [B, S], every row with at least one token).
        ``prefix`` is not changed, so it can serve later calls.

        The same numbers as ``forward`` on the whole paths, for a fraction of the work: the prefix's keys and
        values serve every suffix (causal attention: a prefix token's states do not depend on what follows), and
        the mean pool adds the prefix's summed hidden states to each suffix's. Sibling nodes share their
        parent's whole path, and every node of a task shares the system and task turns.
        """
        batch = suffixes.shape[0]
        length = prefix.length
        cache = copy.deepcopy(prefix.cache)
        cache.batch_repeat_interleave(batch)
        positions = torch.arange(length, length + suffixes.shape[1], device=suffixes.device)
        mask = torch.cat([torch.ones((batch, length), dtype=suffix_mask.dtype, device=suffix_mask.device),
                          suffix_mask], dim=1)
        out = self.decoder(input_ids=suffixes, attention_mask=mask, past_key_values=cache, use_cache=True,
                           cache_position=positions, position_ids=positions.unsqueeze(0).expand(batch, -1))
        weights = suffix_mask.to(torch.float32).unsqueeze(-1)
        summed = prefix.hidden_sum + (out.last_hidden_state.to(torch.float32) * weights).sum(dim=1)
        return self.head(summed / (length + weights.sum(dim=1)))

    # ---------------------------------------------------------------- building

    @classmethod
    def create(cls, config: ModelConfig, device: str | torch.device | None = None,
               dtype: torch.dtype | None = None) -> ValueModel:
        """A fresh model: the backbone from ``config.backbone`` (a folder, or a name such as ``default``, which
        the saved model keeps), new LoRA adapters, a new head."""
        from peft import LoraConfig, get_peft_model

        device = pick_device(device)
        lm = _load_backbone(resolve_backbone(config.backbone), dtype or pick_dtype(device))
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules=list(config.lora_targets), bias="none",
                          layers_to_transform=None if config.lora_layers is None else list(config.lora_layers))
        try:
            peft_model = get_peft_model(lm, lora)
        except ValueError as exc:
            raise ConfigError(f"ModelConfig.lora_targets: {exc}") from exc
        head = ValueHead(lm.config.hidden_size, config.head_dropout, config.head_init_std, config.head_center_momentum)
        return cls(lm, peft_model, head, config).to(device)

    @classmethod
    def load(cls, directory: str | Path, backbone: str | None = None, device: str | torch.device | None = None,
             dtype: torch.dtype | None = None, trainable: bool = False) -> ValueModel:
        """Load a saved model. ``backbone`` overrides the path stored in its config (e.g. on another machine)."""
        from peft import PeftModel
        from safetensors.torch import load_file

        directory = Path(directory)
        config = read_config(directory)
        # a model names its backbone by path, or as the policy's --llm names one ("default": the embedded model)
        config = ModelConfig.from_dict({**config.to_dict(),
                                        "backbone": resolve_backbone(config.backbone if backbone is None
                                                                     else backbone)})
        device = pick_device(device)
        lm = _load_backbone(config.backbone, dtype or pick_dtype(device))
        adapter = directory / ADAPTER_DIR
        if not (adapter / "adapter_config.json").is_file():
            raise ModelLoadError(f"{adapter}: no LoRA adapter here (adapter_config.json missing)")
        peft_model = PeftModel.from_pretrained(lm, str(adapter), is_trainable=trainable)
        head = ValueHead(lm.config.hidden_size, config.head_dropout, config.head_init_std, config.head_center_momentum)
        head_file = directory / HEAD_FILE
        if not head_file.is_file():
            raise ModelLoadError(f"{head_file}: value head weights missing")
        head.load_state_dict(_strip(load_file(str(head_file)), "value_head."))
        model = cls(lm, peft_model, head, config).to(device)
        if not trainable:
            model.eval()
        return model

    def save(self, directory: str | Path) -> Path:
        """Write adapter + head + config (safetensors/JSON) into ``directory``; returns it."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # the adapter names its base as the model's config does ("default", not this machine's cache folder)
        for adapter_config in self.peft_model.peft_config.values():
            adapter_config.base_model_name_or_path = str(self.config.backbone)
        self.peft_model.save_pretrained(str(directory / ADAPTER_DIR), safe_serialization=True)
        state = {f"value_head.{k}": v.detach().to("cpu", torch.float32).contiguous()
                 for k, v in self.head.state_dict().items()}
        save_file(state, str(directory / HEAD_FILE))
        data = {"format_version": FORMAT_VERSION, **self.config.to_dict()}
        (directory / CONFIG_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return directory

    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.named_parameters() if p.requires_grad]


def read_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path}: not a value model folder ({CONFIG_FILE} missing)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path}: invalid JSON: {exc}") from exc
    version = data.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ModelLoadError(f"{path}: format_version {version} is not supported (expected {FORMAT_VERSION})")
    try:
        return ModelConfig.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise ModelLoadError(f"{path}: {exc}") from exc


def _load_backbone(backbone: str, dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        lm = AutoModelForCausalLM.from_pretrained(backbone, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load backbone {backbone!r}: {exc}") from exc
    for parameter in lm.parameters():
        parameter.requires_grad_(False)
    return lm


def _strip(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}
