"""The one base of Jupiter's configuration objects: a frozen pydantic model whose errors name the bad field.

Why one base: every package's settings (sandbox, policy backends, value model, SFT, NbQA stages, benchmark runs,
the service) validate the same way, declared on the fields, and fail with the package's own error type
(``config_error``, a ``ValueError``) and one line such as ``SandboxConfig.timeout_s: must be greater than 0,
got -1`` instead of pydantic's multi-line report.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import Self

__all__ = ["ConfigModel", "describe_errors", "Count", "PositiveInt", "PositiveFloat", "Fraction", "Flag"]

#: Field types most configs share: strict, so that ``True`` is not a count and ``"3"`` is not a number.
PositiveInt = Annotated[int, Field(strict=True, ge=1)]
Count = Annotated[int, Field(strict=True, ge=0)]
PositiveFloat = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(strict=True, ge=0, lt=1, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]


def describe_errors(exc: ValidationError, owner: str, known: Iterable[str] = (), noun: str = "field") -> str:
    """A pydantic validation error as one line: each bad field as ``owner.field: why, got value``, unknown fields
    by name followed by the ``known`` ones (``noun``: what the owner calls its fields)."""
    errors = exc.errors()
    unknown = [".".join(map(str, e["loc"])) for e in errors if e["type"] == "extra_forbidden"]
    known_note = f"; known: {', '.join(known)}" if known else ""
    parts = [f"{owner}: unknown {noun}(s) {', '.join(unknown)}{known_note}"] if unknown else []
    for error in errors:
        where = ".".join(map(str, (owner, *error["loc"])))
        if error["type"] == "extra_forbidden":
            continue
        if error["type"] == "value_error":  # our own check: its message says what was wrong
            parts.append(f"{where}: {error['ctx']['error']}")
        else:
            parts.append(f"{where}: {error['msg'].replace('Input should be', 'must be', 1)}, got {error['input']!r}")
    return "; ".join(parts)


class ConfigModel(BaseModel):
    """Frozen, validated settings; unknown fields are errors. Subclasses set ``config_error`` to their package's
    error type (a ``ValueError``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    config_error: ClassVar[type[ValueError]] = ValueError

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise self.config_error(describe_errors(exc, type(self).__name__, type(self).model_fields)) from None

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied and validated again (``model_copy`` would not check them)."""
        return type(self)(**{**dict(self), **changes})
