"""The knob framework: a knob is a dataclass field declared with `knob()`, carrying its help
text and its rules (bounds, choices) in its metadata. `validate()`, the config file
(samchat.chat.config), the TUI's settings screen and `samchat ask` all read them through
`knobs()`, `Knob.check()`/`Knob.parse()` and `from_mapping()`. The knobs themselves are
declared in samchat/decoding/params.py.

No torch here: the UI and the CLI import this module at start-up.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import ClassVar, Literal, Protocol, TypeVar, get_type_hints

from samchat.errors import SamchatError

# A knob's value: bool, int, float, str (a name of its choices), a tuple of strings, or None
# (an optional knob unset).
KnobValue = bool | int | float | str | tuple[str, ...] | None


class KnobClass(Protocol):
    """A dataclass of knobs (DecodingConfig, SamplingParams): its config.toml table is SECTION."""

    SECTION: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Field[object]]]


T = TypeVar("T")
K = TypeVar("K", bound=KnobClass)

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def knob(
    default: T,
    help: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: float | None = None,
    choices: tuple[str, ...] = (),
) -> T:
    """Declare a knob: a dataclass field with its default, help text and rules (inclusive
    `minimum`/`maximum`, `exclusive_minimum`, or `choices` for a string)."""
    metadata = {
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "exclusive_minimum": exclusive_minimum,
        "choices": tuple(choices),
    }
    out: T = field(default=default, metadata=metadata)
    return out


class KnobError(SamchatError):
    """A knob got a bad value; the message is one line naming the knob, the value and the
    allowed range. `problem` is the same without the knob's name (for argparse)."""

    def __init__(self, knob: Knob, value: object, where: str = "") -> None:
        self.knob = knob
        self.value = value
        if knob.choices:
            choices = ", ".join(knob.choices)
            self.problem = f"unknown {knob.section} {knob.name} {value!r}; use one of {choices}"
            message = f"{knob.qualified}: {self.problem}"
        else:
            self.problem = f"must be {knob.allowed}, got {value!r}"
            message = f"{knob.qualified} {self.problem}"
        super().__init__(f"{where}: {message}" if where else message)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Knob:
    """One knob as the config file, the settings screen and the CLI see it."""

    section: str  # "decoding" | "sampling": the config.toml table
    name: str
    type: type[object]  # int, float, bool, str, or tuple (of strings)
    default: KnobValue
    help: str
    optional: bool = False  # None is a value too (seed: None = random)
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None

    @property
    def qualified(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def allowed(self) -> str:
        """The allowed values in words: 'an integer >= 0', 'a number in (0, 1]', ..."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        kind = {
            bool: "true or false",
            int: "an integer",
            float: "a number",
            str: "a string",
            tuple: "a list of strings",
        }[self.type]
        low = self.minimum if self.minimum is not None else self.exclusive_minimum
        if low is not None and self.maximum is not None:
            left = "[" if self.minimum is not None else "("
            kind += f" in {left}{_number(low)}, {_number(self.maximum)}]"
        elif low is not None:
            kind += f" {'>=' if self.minimum is not None else '>'} {_number(low)}"
        elif self.maximum is not None:
            kind += f" <= {_number(self.maximum)}"
        return f"{kind} or unset" if self.optional else kind

    def check(self, value: object, where: str = "") -> KnobValue:
        """The value in the knob's type (an int for a float knob becomes a float; a list of
        strings a tuple), or KnobError. A bool is never a number."""
        if value is None and self.optional:
            return None
        out = self._coerce(value)
        if out is None:
            raise KnobError(self, value, where)
        return out

    def _coerce(self, value: object) -> KnobValue:
        """The value in the knob's type, or None when it is not allowed."""
        if self.type is bool:
            return value if isinstance(value, bool) else None
        if self.type is str:
            if isinstance(value, str) and (not self.choices or value in self.choices):
                return value
            return None
        if self.type is tuple:
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return tuple(value)
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if self.type is int and not isinstance(value, int):
            return None
        if self.type is float:
            if not math.isfinite(value):
                return None
            value = float(value)
        if (
            (self.minimum is not None and value < self.minimum)
            or (self.exclusive_minimum is not None and value <= self.exclusive_minimum)
            or (self.maximum is not None and value > self.maximum)
        ):
            return None
        return value

    def parse(self, text: str, where: str = "") -> KnobValue:
        """A value typed as text (a settings field, a command-line option), checked. Empty is
        None for an optional knob; a list of strings is comma-separated."""
        raw = text.strip()
        if self.optional and not raw:
            return None
        value: object = raw
        if self.type is bool:
            lowered = raw.lower()
            value = True if lowered in _TRUE else False if lowered in _FALSE else raw
        elif self.type in (int, float):
            with contextlib.suppress(ValueError):  # not a number: check() says what is allowed
                value = int(raw) if self.type is int else float(raw)
        elif self.type is tuple:
            value = tuple(part for part in text.split(",") if part) if text else ()
        elif self.type is str:
            value = text
        return self.check(value, where)

    def text(self, value: object) -> str:
        """The value as parse() reads it back."""
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)


def knobs(cls: type[KnobClass]) -> list[Knob]:
    """The knobs of DecodingConfig or SamplingParams, in declaration order."""
    return list(_knobs(cls))


_KNOBS: dict[type[KnobClass], tuple[Knob, ...]] = {}


def _knobs(cls: type[KnobClass]) -> tuple[Knob, ...]:
    cached = _KNOBS.get(cls)
    if cached is None:
        cached = _KNOBS[cls] = _declared(cls)
    return cached


def _declared(cls: type[KnobClass]) -> tuple[Knob, ...]:
    hints = get_type_hints(cls)
    out: list[Knob] = []
    for f in fields(cls):
        hint = hints[f.name]
        args = getattr(hint, "__args__", ())
        optional = type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if optional else hint
        kind = getattr(base, "__origin__", base)
        if kind is Literal:  # a name of samchat.names: a string of its choices
            kind = str
        if kind not in (bool, int, float, str, tuple):
            raise TypeError(f"{cls.__name__}.{f.name}: knobs of type {hint} are not supported")
        meta = f.metadata
        if "help" not in meta or f.default is MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: declare it with knob(default, help)")
        out.append(
            Knob(
                section=cls.SECTION,
                name=f.name,
                type=kind,
                default=f.default,
                help=meta["help"],
                optional=optional,
                choices=meta["choices"],
                minimum=meta["minimum"],
                maximum=meta["maximum"],
                exclusive_minimum=meta["exclusive_minimum"],
            )
        )
    return tuple(out)


def knob_of(cls: type[KnobClass], name: str) -> Knob:
    """One knob by name (KeyError if there is none)."""
    for k in _knobs(cls):
        if k.name == name:
            return k
    raise KeyError(name)


def from_mapping(cls: type[K], values: Mapping[str, object], where: str = "") -> K:
    """An instance of `cls` from plain values (a config table, form fields, options): types
    checked, defaults filled in, unknown keys refused, rules checked. Raises KnobError (a
    SamchatError) with one line, prefixed with `where` ("config") when given."""
    declared = _knobs(cls)
    names = [k.name for k in declared]
    for key in values:
        if key not in names:
            message = (
                f"unknown {getattr(cls, 'SECTION', cls.__name__)} setting {key!r}; "
                f"known: {', '.join(names)}"
            )
            raise SamchatError(f"{where}: {message}" if where else message)
    checked = {k.name: k.check(values[k.name], where) for k in declared if k.name in values}
    return cls(**checked)


def to_mapping(obj: KnobClass) -> dict[str, KnobValue]:
    """The knobs' values of a DecodingConfig or SamplingParams, in declaration order."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def validate_knobs(obj: KnobClass) -> None:
    """KnobError (a SamchatError, one line) for the first bad value of a knob dataclass."""
    for k in _knobs(type(obj)):
        k.check(getattr(obj, k.name))
