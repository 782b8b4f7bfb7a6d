"""The types every schema is built of: `Schema` (the pydantic base of every input and output: unknown fields are
errors, a validation failure is one `InputError` line naming the field path) and the field types that refuse silent
coercion (`Count`, `Count0`, `Flag`, `Real`, `PositiveReal`, `IntLiteral`, `MAX_COUNT`).
"""

from __future__ import annotations

import contextvars
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError

from .errors import InputError


def _plain(v):
    """numpy integer/float/bool scalars (from sweeps and fits) become Python ones; everything else is left to strict
    checks."""
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    return v


# The largest count a file, the API or a flag takes (2**31 - 1, torch's and NCCL's int32 limit; argtypes uses it too): far beyond any cluster, batch, width or sequence, and it keeps what the cost model
# derives from counts (divisors, products in int64) fast and exact. A typo such as 10**30 is refused.
MAX_COUNT = 2**31 - 1

# Counts and flags: no silent coercion of True to 1, 8.0 to 8 or "yes" to True.
Count = Annotated[int, BeforeValidator(_plain), Strict(), Field(gt=0, le=MAX_COUNT)]
Count0 = Annotated[int, BeforeValidator(_plain), Strict(), Field(ge=0, le=MAX_COUNT)]  # a count that may be 0
Flag = Annotated[bool, BeforeValidator(_plain), Strict()]
Precision = Literal["bf16", "fp16", "fp8", "fp4", "int8"]  # a plan's GEMM precision (Plan.precision)
def _whole(v):
    """An int for a Literal of ints, which Strict() does not apply to: True == 1 and 1.0 == 1 would pass it."""
    v = _plain(v)
    if isinstance(v, (bool, float)):
        raise ValueError(f"got {v!r}; valid: an integer, not a {type(v).__name__}")
    return v


IntLiteral = BeforeValidator(_whole)  # Annotated[Literal[0, 1, 2], IntLiteral]
# Numbers in files: an int or a float (finite: Schema refuses NaN and inf), never a bool or a numeric string.
Real = Annotated[float, BeforeValidator(_plain), Strict()]
PositiveReal = Annotated[float, BeforeValidator(_plain), Strict(), Field(gt=0)]


def _loc_part(x) -> str:
    """A field path component as a message writes it: a printable key as is, any other (an unknown key that is
    empty, has control characters or leading or trailing blanks) quoted as repr() writes it."""
    text = str(x)
    return text if text and text.isprintable() and text.strip() == text else repr(text)


def format_validation_error(err: ValidationError, where: str) -> str:
    """Collapse a pydantic ValidationError into one line per the project's bad-input rule."""
    parts = []
    for e in err.errors():
        loc = ".".join(_loc_part(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if not loc:  # a check of the whole object (a model validator): its message names the fields
            parts.append(f"{where}: {msg}")
        elif e["type"] == "missing":
            parts.append(f"{where}.{loc} is required")
        elif e["type"] == "extra_forbidden":
            parts.append(f"{where}.{loc} is not a known field")
        elif "input" in e and not isinstance(e["input"], (dict, list)) and e["type"] != "value_error":
            parts.append(f"{where}.{loc} = {e['input']!r}: {msg}")
        else:
            parts.append(f"{where}.{loc}: {msg}")
    return "; ".join(parts)


# Pydantic calls a custom __init__ for nested models too; only the outermost call turns errors into InputError,
# so that nested failures keep their full field path (e.g. System.tiers.0.bandwidth_gbps).
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("schema_depth", default=0)


class Schema(BaseModel):
    """Base of every input/output schema: unknown fields are errors, and validation failures are InputError."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

    def __init__(self, /, **data: Any) -> None:
        outer = _depth.get() == 0
        token = _depth.set(_depth.get() + 1)
        try:
            super().__init__(**data)
        except ValidationError as err:
            if not outer:
                raise
            raise InputError(format_validation_error(err, type(self).__name__)) from None
        finally:
            _depth.reset(token)

    @classmethod
    def parse(cls, data: Any, where: str | None = None):
        """Validate a mapping (e.g. loaded YAML/JSON) into this schema, raising InputError on failure."""
        if not isinstance(data, dict):
            raise InputError(f"{where or cls.__name__}: expected a mapping of fields, got {type(data).__name__}")
        token = _depth.set(_depth.get() + 1)
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise InputError(format_validation_error(err, where or cls.__name__)) from None
        finally:
            _depth.reset(token)
