"""Holds the shared shape of a machine: a transition table (data) and one stepping routine.

A table maps (state, event type) to either a target state (a plain transition, whose effect
function records the event's data) or a ``Guard``: a pure function that inspects the state
and the event and returns the next state or a ``Refusal``. A guard declares every state it
may choose, so the table can be rendered, and checked for reachability, without running it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from machines.refusal import Refusal
from vocabulary.events import Event

__all__ = ["Edge", "Guard", "Stateful", "Table", "build", "evolve"]


class Stateful(Protocol):
    """Is any machine state: it names the machine state it is in."""

    @property
    def status(self) -> str:
        """Returns the name of the machine state."""
        ...


S = TypeVar("S", bound=Stateful)
C = TypeVar("C")
T = TypeVar("T")

_FIELDS: dict[type, frozenset[str]] = {}
_DEFAULTS: dict[type, tuple[frozenset[str], frozenset[str], dict[str, object]]] = {}
#: (class, field names in call order) that ``build`` has checked.
_SHAPES: set[tuple[type, tuple[str, ...]]] = set()
_new_object = object.__new__
_set_attribute = object.__setattr__


def build(cls: type[T], **fields: object) -> T:
    """Returns a new frozen (non-slots) dataclass instance without running ``__init__``.

    Why: a frozen ``__init__`` sets each field through ``object.__setattr__``; for the
    20-odd fields of a machine state that is most of the cost of opening a stream. Every
    field without a default must be given; unknown names are refused; defaults fill the rest.
    The names are checked once per class and spelling of the call (``_SHAPES``): comparing
    them as sets costs more than the rest of the build.
    """
    shape = (cls, tuple(fields))
    known = _DEFAULTS.get(cls)
    if known is None:
        every = dataclasses.fields(cls)  # type: ignore[arg-type]
        required = frozenset(f.name for f in every if f.default is dataclasses.MISSING)
        defaults = {f.name: f.default for f in every if f.default is not dataclasses.MISSING}
        known = _DEFAULTS[cls] = (required, required | defaults.keys(), defaults)
    required, allowed, defaults = known
    if shape not in _SHAPES:
        if not required.issubset(fields) or not allowed.issuperset(fields):
            raise TypeError(f"{cls.__name__} needs {sorted(required)}, got {sorted(fields)}")
        _SHAPES.add(shape)
    attrs = defaults.copy()
    attrs.update(fields)
    new = _new_object(cls)
    _set_attribute(new, "__dict__", attrs)
    return new


def evolve(state: T, **changes: object) -> T:
    """Returns a copy of a frozen (non-slots) dataclass or a named tuple with ``changes``.

    Why not ``dataclasses.replace``: it re-runs ``__init__`` field by field and costs about
    four times as much; the fold applies one of these per event. Field names are checked:
    the state's ``__dict__`` holds exactly its fields, so an unknown name is one that makes
    the copy grow, and only then are the names compared.
    """
    try:
        source = state.__dict__
    except AttributeError:  # a named tuple (no __dict__); cheaper than an isinstance first
        return cast(T, state._replace(**changes))  # type: ignore[attr-defined]
    attrs = source | changes
    cls = type(state)
    if len(attrs) != len(source):
        names = _FIELDS.get(cls)
        if names is None:
            names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        if not names.issuperset(changes):
            raise TypeError(f"{cls.__name__} has no field(s) {sorted(set(changes) - names)}")
    new = _new_object(cls)
    _set_attribute(new, "__dict__", attrs)
    return new


@dataclass(frozen=True)
class Guard(Generic[S, C]):
    """Chooses the target of a transition from the event's content, or refuses the event.

    ``targets`` lists every state ``choose`` may return a state in; ``label`` is the
    condition shown on the diagram.
    """

    targets: tuple[str, ...]
    choose: Callable[[S, Any, C], S | Refusal]
    label: str = ""


Rule = str | Guard[S, C]
Effect = Callable[[S, Any, str], S]
Move = Callable[[S, Any, C], "S | Refusal"]


def _plain(effect: Effect[S], target: str) -> Move[S, Any]:
    """Returns the move of a plain transition: ``effect``, told its target state."""

    def move(state: S, event: Any, _: Any) -> S:
        return effect(state, event, target)

    return move


def _unbound(effects: Mapping[str, Effect[S]], event_type: str, target: str) -> Move[S, Any]:
    """Returns the move of a plain transition whose effect is missing: it fails when run."""

    def move(state: S, event: Any, _: Any) -> S:
        return effects[event_type](state, event, target)  # KeyError, as before compiling

    return move


@dataclass(frozen=True)
class Edge:
    """Is one arrow of a state diagram: source, event type, target and condition."""

    source: str
    event_type: str
    target: str
    label: str = ""


@dataclass(frozen=True)
class Table(Generic[S, C]):
    """Is a machine's transition table plus the effects of its plain transitions.

    ``opening`` is the event type that starts a stream in ``initial``. ``refusals`` names a
    specific code for (state, event type) pairs that are not transitions; any other missing
    pair is refused with ``terminal_state`` or ``transition_not_allowed``.
    """

    machine: str
    states: tuple[str, ...]
    initial: str
    opening: str
    terminals: frozenset[str]
    rules: Mapping[tuple[str, str], Rule[S, C]]
    effects: Mapping[str, Effect[S]] = field(default_factory=dict)
    refusals: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: ``rules`` compiled to one callable per (state, event type): the guard's ``choose``,
    #: or the plain transition's effect with its target bound. Derived, so not compared.
    moves: Mapping[tuple[str, str], Move[S, C]] = field(
        init=False, default_factory=dict, compare=False, repr=False
    )
    #: ``moves`` by (state, event class), None where there is none, filled as ``step``
    #: meets them: an event's ``event_type`` is a class attribute that pydantic's
    #: ``__getattr__`` makes slow to read through an instance, and a class always has the
    #: same one. A few dozen entries at most (states × event classes). Derived, not compared.
    by_class: dict[tuple[str, type[Event]], Move[S, C] | None] = field(
        init=False, default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        moves: dict[tuple[str, str], Move[S, C]] = {}
        for (status, event_type), rule in self.rules.items():
            if isinstance(rule, Guard):
                moves[status, event_type] = rule.choose
            elif event_type in self.effects:
                moves[status, event_type] = _plain(self.effects[event_type], rule)
            else:
                moves[status, event_type] = _unbound(self.effects, event_type, rule)
        object.__setattr__(self, "moves", moves)

    def refuse(self, state: str, event_type: str, code: str, detail: str = "") -> Refusal:
        """Builds this machine's refusal of ``event_type`` in ``state``."""
        return Refusal(self.machine, state, event_type, code, detail)

    def step(self, state: S, event: Event, context: C) -> S | Refusal:
        """Returns the state after ``event``, or the refusal of it; ``state`` is unchanged."""
        status = state.status
        try:
            move = self.by_class[status, type(event)]
        except KeyError:
            move = self.move_of(status, type(event))
        if move is None:
            event_type = event.event_type
            return self.refuse(status, event_type, self.missing_code(status, event_type))
        return move(state, event, context)

    def move_of(self, status: str, kind: type[Event]) -> Move[S, C] | None:
        """Returns the move for an event class in ``status`` (None: ``step`` refuses it),
        keeping it in ``by_class``, where ``step`` and a fold's hot path look first."""
        move = self.by_class[status, kind] = self.moves.get((status, kind.event_type))
        return move

    def missing_code(self, status: str, event_type: str) -> str:
        """Returns the refusal code for a (state, event type) pair with no transition."""
        specific = self.refusals.get((status, event_type))
        if specific is not None:
            return specific
        if status in self.terminals:
            return "terminal_state"
        return "transition_not_allowed"

    def event_types(self) -> tuple[str, ...]:
        """Returns every event type the machine has a rule for, opening first."""
        seen = {self.opening: None}
        for _, event_type in self.rules:
            seen.setdefault(event_type, None)
        return tuple(seen)

    def edges(self) -> Iterator[Edge]:
        """Yields every arrow of the diagram, guards expanded into one arrow per target."""
        for (source, event_type), rule in self.rules.items():
            if isinstance(rule, Guard):
                for target in rule.targets:
                    yield Edge(source, event_type, target, rule.label)
            else:
                yield Edge(source, event_type, rule)

    def reachable(self) -> frozenset[str]:
        """Returns the states reachable from ``initial`` along the table's arrows."""
        seen = {self.initial}
        frontier = [self.initial]
        arrows: dict[str, set[str]] = {}
        for edge in self.edges():
            arrows.setdefault(edge.source, set()).add(edge.target)
        while frontier:
            for target in arrows.get(frontier.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    frontier.append(target)
        return frozenset(seen)
