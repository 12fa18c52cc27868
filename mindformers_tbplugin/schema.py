"""Parameter schemas of the callbacks and the alert rules, derived from the classes themselves.

A callback or an alert rule declares its parameters once, in its ``__init__`` signature: the type
hint (optionally ``Annotated`` with a :class:`Range`, :class:`Choices` or :class:`Kind`), the default,
and a line in the class docstring's ``Args:`` section. Everything else (validation at construction,
``mftb validate``, ``mftb watch --list-rules``, docs) is derived here, so a new parameter needs no
second edit. An ``__init__`` that takes ``**kwargs`` and passes them on to its base class also has the
base's parameters.

Rules a signature cannot express (several parameters together, or the inside of a structured value
such as a ``list[dict]`` of rules) go in an optional classmethod hook on the class::

    @classmethod
    def check_cross_fields(cls, arguments: Mapping[str, Any]) -> list[Problem]: ...

It runs only once every argument has the right type, receives every parameter (defaults filled in),
and returns one :class:`Problem` per rule broken. A problem's ``key`` may be a path inside a
parameter (``rules[2].threshold``) so that ``mftb validate`` points at the exact YAML line.
:func:`check_entry` runs both stages; constructors and the config checker call it.
"""

from __future__ import annotations

import difflib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

_NoneType = type(None)
UNION_ORIGINS = (Union, types.UnionType)  # Optional[int] and int | None


@dataclass(frozen=True)
class Range:
    """Inclusive numeric bounds for a parameter."""

    min: float | None = None
    max: float | None = None

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return f"between {self.min:g} and {self.max:g}"
        if self.min is not None:
            return f">= {self.min:g}"
        return f"<= {self.max:g}"

    def violated_by(self, value: float) -> bool:
        return (self.min is not None and value < self.min) or (self.max is not None and value > self.max)


@dataclass(frozen=True)
class Choices:
    """The allowed values of a parameter."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Kind:
    """A kind of value no type hint spells, such as "one tag or a non-empty list of tags": the name
    messages give it and the test a value must pass (instead of the hint's)."""

    name: str
    accepts: Callable[[Any], bool]
    json_schema: dict[str, Any] | None = None  # what editors check instead of the hint's type


def _is_non_empty_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


# A path or a name: an empty string (typically an unset variable in a templated config) is a mistake.
NON_EMPTY_TEXT = Kind("non-empty string", _is_non_empty_text, {"type": "string", "pattern": "\\S"})


@dataclass(frozen=True)
class Param:
    """One constructor parameter of a callback or an alert rule, as the schema sees it."""

    name: str
    type: Any  # the bare type: int, float, str, bool, list[str], ...
    optional: bool  # None is allowed
    default: Any
    required: bool
    range: Range | None
    choices: Choices | None
    doc: str
    kind: Kind | None = None

    def type_name(self) -> str:
        return (self.kind.name if self.kind else _type_name(self.type)) + (" or null" if self.optional else "")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a callback entry. ``key`` is the parameter name ('' for the entry)."""

    key: str
    message: str

    def render(self, prefix: str = "") -> str:
        where = f"{prefix}.{self.key}" if prefix and self.key else (prefix or self.key)
        return f"{where}: {self.message}" if where else self.message


class ConfigError(ValueError):
    """A callback's configuration is invalid. ``problems`` lists every problem found."""

    def __init__(self, message: str, problems: Sequence[Problem] = ()) -> None:
        # One-argument construction must work: MindFormers re-raises as ``type(e)(prefix + str(e))``.
        super().__init__(message)
        self.problems = list(problems)

    @classmethod
    def for_owner(cls, owner: str, problems: Sequence[Problem]) -> ConfigError:
        lines = "\n".join(f"  - {p.render(owner)}" for p in problems)
        return cls(f"invalid configuration for {owner}:\n{lines}", problems)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return f"list of {_type_name(item)}"
    if origin in UNION_ORIGINS:
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return " or ".join(repr(v) for v in typing.get_args(tp))
    return {int: "integer", float: "number", str: "string", bool: "boolean", dict: "mapping"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _doc_lines(cls: type) -> dict[str, str]:
    """``name: text`` entries from the ``Args:`` section of the class docstring (Google style)."""
    docs: dict[str, str] = {}
    in_args, current = False, None
    for raw in inspect.getdoc(cls).splitlines() if cls.__doc__ else []:
        line = raw.rstrip()
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args and line and not line.startswith(" "):
            break
        match = re.match(r"^ {4}(\w+)(?: \([^)]*\))?: ?(.*)$", line) if in_args else None
        if match:
            current = match.group(1)
            docs[current] = match.group(2).strip()
        elif in_args and current and line.strip():
            docs[current] = f"{docs[current]} {line.strip()}"
    return docs


def summary_of(cls: type) -> str:
    """The first paragraph of the class docstring, on one line."""
    return (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")


OPTIONS = "OPTIONS"  # a class attribute naming the dataclass of a callback's options (its ``**options``)


def _init_owners(cls: type) -> Iterator[type]:
    """The class whose ``__init__`` ``cls`` uses, then the next one up while an ``__init__`` takes ``**kwargs``;
    a class with an ``OPTIONS`` dataclass stands for it."""
    for owner in cls.__mro__[:-1]:  # not object
        if OPTIONS in vars(owner):
            yield vars(owner)[OPTIONS]
            return
        if "__init__" not in vars(owner):
            continue
        yield owner
        if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(owner.__init__).parameters.values()):
            return


def params_of(cls: type) -> list[Param]:
    """The parameters of ``cls.__init__`` (and of the base ``__init__`` its ``**kwargs`` go to) with
    their types, constraints, defaults and docs."""
    params: dict[str, Param] = {}
    for owner in _init_owners(cls):
        hints = typing.get_type_hints(owner.__init__, include_extras=True)
        docs = _doc_lines(owner)
        for name, parameter in inspect.signature(owner.__init__).parameters.items():
            if name == "self" or name in params or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            params[name] = _param(name, parameter, hints.get(name, Any), docs.get(name, ""))
    return list(params.values())


def _param(name: str, parameter: inspect.Parameter, hint: Any, doc: str) -> Param:
    """The hint taken apart: ``Annotated`` constraints, ``| None`` as optional, a ``Literal`` as choices."""
    constraint_range = constraint_choices = kind = None
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        for extra in extras:
            if isinstance(extra, Range):
                constraint_range = extra
            elif isinstance(extra, Choices):
                constraint_choices = extra
            elif isinstance(extra, Kind):
                kind = extra
    optional = False
    if typing.get_origin(hint) in UNION_ORIGINS and _NoneType in typing.get_args(hint):
        optional = True
        rest = tuple(a for a in typing.get_args(hint) if a is not _NoneType)
        hint = rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007  (built at run time)
    if typing.get_origin(hint) is typing.Literal:
        constraint_choices = Choices(typing.get_args(hint))
        hint = type(constraint_choices.values[0])
    required = parameter.default is inspect.Parameter.empty
    return Param(
        name=name,
        type=hint,
        optional=optional,
        default=None if required else parameter.default,
        required=required,
        range=constraint_range,
        choices=constraint_choices,
        doc=doc,
        kind=kind,
    )


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in UNION_ORIGINS:
        return any(_matches(value, a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp) and not isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return isinstance(value, (list, tuple)) and all(_matches(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, tp)


def check_value(param: Param, value: Any) -> str | None:
    """Why ``value`` is not acceptable for ``param``, or None when it is."""
    if value is None:
        null_allowed = param.optional or (param.default is None and not param.required)  # `= None` allows it
        return None if null_allowed else f"expected {param.type_name()}, got null"
    if not (param.kind.accepts(value) if param.kind else _matches(value, param.type)):
        return f"expected {param.type_name()}, got {value!r} ({_type_name(type(value))})"
    if param.choices is not None and value not in param.choices.values:
        allowed = ", ".join(repr(v) for v in param.choices.values)
        return f"expected one of {allowed}, got {value!r}"
    if param.range is not None and isinstance(value, (int, float)) and param.range.violated_by(value):
        return f"expected {param.type_name()} {param.range.describe()}, got {value!r}"
    return None


def check_arguments(cls: type, arguments: dict[str, Any]) -> list[Problem]:
    """Every problem with the constructor ``arguments`` of ``cls`` (type, range, choices)."""
    problems = []
    for param in params_of(cls):
        if param.name in arguments:
            reason = check_value(param, arguments[param.name])
            if reason:
                problems.append(Problem(param.name, reason))
    return problems


CROSS_FIELD_HOOK = "check_cross_fields"


def check_entry(cls: type, arguments: dict[str, Any]) -> list[Problem]:
    """Every problem with ``arguments``: types, ranges and choices, then the class's cross-field hook."""
    problems = check_arguments(cls, arguments)
    hook = getattr(cls, CROSS_FIELD_HOOK, None)
    if problems or hook is None:
        return problems
    complete = {p.name: p.default for p in params_of(cls) if not p.required} | dict(arguments)
    return list(hook(complete))


def did_you_mean(word: Any, candidates: Iterable[Any]) -> str | None:
    """``did you mean 'spike'?`` for the candidate closest to ``word`` (case-insensitive), or None."""
    by_lower = {str(c).lower(): str(c) for c in candidates}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean '{by_lower[close[0]]}'?" if close else None
