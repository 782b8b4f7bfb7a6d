"""What a serving or benchmark command became (`CommandRead`), the running account a reader keeps of it
(`Account`), and the value readers its flags share.

The fields a command sets are named as `perfmodel infer`'s own flags' destinations (`tp`, `max_batch`,
`request_rate`, ...), so the CLI fills the flags the user left out from them one for one. Every flag the command
states gets a `KeyFate` (perfmodel.ingest.ledger): mapped onto those fields, not priced and why, or a default of
the tool's that a field was taken from.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import Field

from ...errors import InputError
from ...types import Schema
from ..ledger import KeyFate, text_of

Program = Literal["vllm serve", "sglang.launch_server", "vllm bench serve", "sglang.bench_serving", "inference-perf"]


class CommandRead(Schema):
    """A server's or a benchmark's command (or an inference-perf config) read as data."""

    program: Program = Field(description="the tool the command runs")
    text: str = Field(description="the command or config as given")
    fields: dict[str, Any] = Field(description="perfmodel infer flag destinations it sets (tp, max_batch, "
                                               "input_len, request_rate, ...) -> value")
    set_by: dict[str, str] = Field(default_factory=dict, description="field -> the key that set it")
    keys: list[KeyFate] = Field(description="every key the command states, in the order written, and the tool's "
                                            "defaults that a field was taken from")
    model_id: str | None = Field(None, description="the model as the command names it (a Hugging Face id or path)")
    notes: list[str] = Field(default_factory=list, description="what the reader assumed, one line each")

    def lines(self) -> list[str]:
        """Every key's fate, one line each, as `--explain` prints them."""
        return [k.line() for k in self.keys]


class Account:
    """The fields one command sets and every key's fate. `set` maps a key onto fields, refusing a second key
    that sets a field to another value (naming both); `skip` names a key as not priced; `default` takes a field
    from the tool's default where no key set it."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.fields: dict[str, Any] = {}
        self.set_by: dict[str, str] = {}
        self.keys: list[tuple[float, KeyFate]] = []
        self.notes: list[str] = []

    def _source(self, word: float) -> str:
        return f"{self.what}, word {int(word)}" if word >= 0 else self.what

    def set(self, key: str, value, word: float, why: str = "", **fields) -> None:
        for name, new in fields.items():
            if name in self.fields and self.fields[name] != new:
                raise InputError(f"{self.what} contradicts itself: {self.set_by[name]} sets {name} = "
                                 f"{text_of(self.fields[name])} but {key} = {text_of(value)} sets it to "
                                 f"{text_of(new)}; valid: one of them, or both agreeing")
            self.set_by.setdefault(name, f"{key} = {text_of(value)}")
            self.fields[name] = new
        became = ", ".join(f"{n} = {text_of(v)}" for n, v in fields.items())
        self.keys.append((word, KeyFate(key=key, value=text_of(value), source=self._source(word), fate="mapped",
                                        became=became, why=why)))

    def drop(self, key: str, *fields: str) -> None:
        """Forget what `key` set (its fate and `fields`): a later key decides them instead (SGLang's
        generated-shared-prefix sends its own count of requests, whatever --num-prompts said)."""
        self.keys = [(w, k) for w, k in self.keys if k.key != key]
        for name in fields:
            self.fields.pop(name, None)
            self.set_by.pop(name, None)

    def skip(self, key: str, value, word: float, why: str) -> None:
        self.keys.append((word, KeyFate(key=key, value=text_of("true" if value is None else value),
                                        source=self._source(word), fate="not priced", why=why)))

    def default(self, key: str, value, why: str = "", **fields) -> None:
        fields = {n: v for n, v in fields.items() if n not in self.fields}
        if not fields:
            return
        for name, new in fields.items():
            self.fields[name] = new
            self.set_by[name] = f"{key} (default {text_of(value)})"
        became = ", ".join(f"{n} = {text_of(v)}" for n, v in fields.items())
        self.keys.append((math.inf, KeyFate(key=key, value=text_of(value), source=f"{self.what.split(' ')[0]}'s "
                                            "default", fate="default", became=became, why=why)))

    def read(self, program: Program, text: str, model_id: str | None = None, hows: dict[str, str] | None = None
             ) -> CommandRead:
        """The result; `hows` (a key as written -> how it was read: an abbreviation, an underscore spelling) is
        added to the fates of those keys."""
        keys = [k for _, k in sorted(self.keys, key=lambda wk: wk[0])]
        hows = hows or {}
        keys = [k.model_copy(update={"why": f"{k.why}; {hows[k.key]}" if k.why else hows[k.key]})
                if hows.get(k.key) and hows[k.key] not in k.why else k for k in keys]
        return CommandRead(program=program, text=text, fields=self.fields, set_by=self.set_by, keys=keys,
                           model_id=model_id, notes=self.notes)


# ------------------------------------------------------------------------------------------------ values
def count(key: str, value: str | None, what: str, least: int = 1) -> int:
    """A whole number >= least; InputError naming the key and the value."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = None
    if n is None or n < least:
        raise InputError(f"{what}: {key} = {value!r}; valid: a whole number >= {least}")
    return n


def number(key: str, value: str | None, what: str, low: float = 0.0, high: float = math.inf,
           above: bool = True, infinite: bool = False) -> float:
    """A number in (low, high] (or [low, high] with above=False); inf where `infinite` allows it."""
    try:
        x = float(str(value).strip())
    except ValueError:
        x = math.nan
    if math.isinf(x) and x > 0 and infinite:
        return x
    if not math.isfinite(x) or x > high or x < low or (above and x == low):
        bound = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise InputError(f"{what}: {key} = {value!r}; valid: a number {bound}" + (", or inf" if infinite else ""))
    return x


def switch(key: str, value: str | None, what: str) -> bool:
    """A switch: given alone (true), `--no-X` (false), or with true / false."""
    if value is None:
        return True
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InputError(f"{what}: {key} = {value!r}; valid: {key} alone (on), its --no- form (off), or true / false")


def json_object(key: str, value: str | None, what: str, example: str) -> dict:
    """A JSON object given as a flag's value (`--speculative-config '{"method": "eagle", ...}'`)."""
    try:
        data = json.loads(str(value))
    except ValueError as err:
        raise InputError(f"{what}: {key} = {str(value)[:120]!r} is not JSON ({err.args[0].split(':')[0]}); valid: a "
                         f"JSON object such as '{example}'") from None
    if not isinstance(data, dict):
        raise InputError(f"{what}: {key} = {str(value)[:120]!r} is a JSON {type(data).__name__}; valid: a JSON "
                         f"object such as '{example}'")
    return data


def choice(key: str, value: str | None, what: str, table: dict[str, Any]) -> Any:
    """The entry of `table` that `value` names (case aside); InputError listing the valid ones."""
    text = str(value).strip().lower()
    if text not in table:
        raise InputError(f"{what}: {key} = {value!r}; valid: {', '.join(table)}")
    return table[text]
