"""Names the MLP deltas the bridge can install, and gives each a stable digest.

A delta is data (:class:`DeltaSpec`): either a *registered* delta shipped with the bridge
(``faithful``, ``fast_mlp``, ``fused_gate_up``, ``wrong_mlp``, ``skip_mlp``, ``scaled``,
``slow`` and the two deliberate-fault controls ``engine_kill`` and ``pod_restart``), or a
*file* delta: a
user's Python file with a declared entry point. A registered delta's digest is the sha256
of a canonical description (so arenas can register it as a control); a file delta's digest
is the sha256 of the file's bytes. This module imports no torch: building the candidate
module happens in :mod:`engine_bridge.delta_modules`, imported lazily.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from engine_bridge.decimals import is_canonical_decimal
from engine_bridge.limits import slow_delta_repeats_max, windows_max
from vocabulary import limits
from vocabulary.codec import digest
from vocabulary.errors import IntegrityError, InvalidInput, NotFound, read_input

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "DEFAULT_TARGET_MODULES",
    "DELTA_DIGEST_DOMAIN",
    "DELTA_REGISTRY_VERSION",
    "ENTRY_POINT_DECLARATION",
    "REGISTRY",
    "DeltaSpec",
    "RegisteredDelta",
    "build_candidate",
    "control_deltas",
    "install_delta",
    "load_file_delta",
    "registered",
    "registered_by_digest",
]

DELTA_DIGEST_DOMAIN = "arena-ledger.delta"
DELTA_REGISTRY_VERSION = "engine-bridge-deltas.v1"
#: The node every registered delta targets: each decoder layer's MLP.
DEFAULT_TARGET_MODULES: tuple[str, ...] = ("model.layers.*.mlp",)
#: A file delta may declare its entry point with ``ARENA_DELTA_ENTRY_POINT = "name"``.
ENTRY_POINT_DECLARATION = "ARENA_DELTA_ENTRY_POINT"
DEFAULT_ENTRY_POINT = "build_mlp"
DeltaKind = Literal["registered", "file"]


@dataclass(frozen=True)
class RegisteredDelta:
    """Describes one shipped delta: what it does, its parameters and its control kind."""

    name: str
    description: str
    control_kind: str
    defaults: Mapping[str, str] = field(default_factory=dict)


REGISTRY: Mapping[str, RegisteredDelta] = MappingProxyType({
    d.name: d for d in (
        RegisteredDelta("faithful", "stock math, calls the stock sub-modules with `up` "
                        "before `gate`", "identity"),
        RegisteredDelta("fast_mlp", "stock math as three GEMMs on pre-transposed weights, "
                        "SiLU and multiply in place", "honest"),
        RegisteredDelta("fused_gate_up", "gate and up projections fused into one GEMM on "
                        "pre-transposed weights, SiLU and multiply in place", "custom"),
        RegisteredDelta("wrong_mlp", "exact GELU in place of SiLU", "wrong_mlp"),
        RegisteredDelta("skip_mlp", "returns zeros instead of the MLP output", "skip_mlp"),
        RegisteredDelta("scaled", "stock output times (1 + epsilon)", "custom",
                        {"epsilon": "0.001"}),
        RegisteredDelta("slow", "stock math computed `repeats` times; same output", "custom",
                        {"repeats": "8"}),
        RegisteredDelta("engine_kill", "stock math; the lane dies in the middle of `window`",
                        "engine_kill", {"window": "2"}),
        RegisteredDelta("pod_restart", "stock math; the lane's service restarts before "
                        "`window`", "pod_restart", {"window": "2"}),
    )
})


@dataclass(frozen=True)
class DeltaSpec:
    """Identifies one delta as plain data that crosses process boundaries and hook configs."""

    kind: DeltaKind
    name: str
    params: Mapping[str, str] = field(default_factory=dict)
    path: str | None = None
    file_sha256: str | None = None

    @property
    def digest(self) -> str:
        """Returns the delta digest (64 lowercase hex)."""
        if self.kind == "file":
            assert self.file_sha256 is not None
            return self.file_sha256
        payload = {"kind": "registered", "name": self.name, "params": dict(self.params),
                   "registry": DELTA_REGISTRY_VERSION}
        return digest(DELTA_DIGEST_DOMAIN, payload)

    def param_int(self, key: str) -> int:
        """Returns an integer parameter."""
        return int(self.params[key])

    def to_dict(self) -> dict[str, Any]:
        """Returns the JSON-ready form used in hook configs and lane commands."""
        return {"kind": self.kind, "name": self.name, "params": dict(self.params),
                "path": self.path, "file_sha256": self.file_sha256}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeltaSpec:
        """Rebuilds a spec from :meth:`to_dict` output, re-validating registered ones."""
        if data["kind"] == "registered":
            return registered(data["name"], **dict(data.get("params") or {}))
        return cls("file", data["name"], {}, data["path"], data["file_sha256"])


def registered(name: str, **params: str) -> DeltaSpec:
    """Returns the spec of a registered delta, defaults filled in and parameters checked."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise NotFound(f"no registered delta {name!r}; known: {sorted(REGISTRY)}", name=name)
    unknown = sorted(set(params) - set(entry.defaults))
    if unknown:
        raise InvalidInput(f"delta {name!r} takes no parameter(s) {unknown}", name=name)
    merged = {**entry.defaults, **params}
    for key, value in merged.items():
        if not isinstance(value, str) or not is_canonical_decimal(value):
            raise InvalidInput(f"parameter {key} of delta {name!r} must be a canonical "
                               f"decimal string, got {value!r}", name=name, param=key)
    _check_bounds(name, merged)
    return DeltaSpec("registered", name, MappingProxyType(dict(sorted(merged.items()))))


def _check_bounds(name: str, params: Mapping[str, str]) -> None:
    if name == "slow" and not 1 <= _whole(name, params, "repeats") <= slow_delta_repeats_max:
        raise InvalidInput(f"slow repeats must be 1..{slow_delta_repeats_max}", name=name)
    if name in ("engine_kill", "pod_restart") and not (
            1 <= _whole(name, params, "window") <= windows_max):
        raise InvalidInput(f"{name} window must be 1..{windows_max}", name=name)


def _whole(name: str, params: Mapping[str, str], key: str) -> int:
    """Returns a canonical-decimal parameter that must be a whole number, as an int."""
    value = Decimal(params[key])
    if value != value.to_integral_value():
        raise InvalidInput(f"parameter {key} of delta {name!r} must be a whole number, got "
                           f"{params[key]!r}", name=name, param=key)
    return int(value)


def control_deltas() -> list[dict[str, str]]:
    """Lists every registered delta with default parameters: name, control kind, digest."""
    rows = []
    for name, entry in sorted(REGISTRY.items()):
        rows.append({"name": name, "control_kind": entry.control_kind,
                     "delta_digest": registered(name).digest})
    return rows


def registered_by_digest(digest: str, candidates: Sequence[DeltaSpec] = ()) -> DeltaSpec:
    """Finds the registered delta (defaults, or one of ``candidates``) with this digest."""
    pool = [registered(name) for name in sorted(REGISTRY)] + list(candidates)
    for spec in pool:
        if spec.digest == digest:
            return spec
    raise NotFound(f"no registered delta has digest {digest}", digest=digest)


def load_file_delta(path: str | Path, entry_point: str | None = None) -> DeltaSpec:
    """Reads a user delta file; its digest is the sha256 hex of the file's bytes.

    The entry point is ``entry_point`` if given, else the file's top-level
    ``ARENA_DELTA_ENTRY_POINT = "name"`` declaration, else ``build_mlp``. The file is
    parsed, never executed, here; it must define that function at top level.
    """
    source = Path(path).resolve()
    # regular: read again when loaded
    data = read_input(source, "delta file", regular=True, limit=limits.input_file_bytes_max)
    try:
        tree = ast.parse(data, filename=str(source))
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
        raise InvalidInput(f"delta file {source} is not valid Python: {exc}",
                           path=str(source)) from None
    name = entry_point or _declared_entry_point(tree) or DEFAULT_ENTRY_POINT
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if name not in defined:
        raise InvalidInput(f"delta file {source} defines no top-level function {name!r}",
                           path=str(source), entry_point=name)
    return DeltaSpec("file", name, {}, str(source), hashlib.sha256(data).hexdigest())


def _declared_entry_point(tree: ast.Module) -> str | None:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == ENTRY_POINT_DECLARATION
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def build_candidate(spec: DeltaSpec, stock: nn.Module) -> nn.Module:
    """Returns the candidate module for one stock node, sharing the stock's weights."""
    from engine_bridge import delta_modules

    if spec.kind == "registered":
        return delta_modules.build_registered(spec.name, spec.params, stock)
    assert spec.path is not None
    data = Path(spec.path).read_bytes()
    if hashlib.sha256(data).hexdigest() != spec.file_sha256:
        raise IntegrityError(f"delta file {spec.path} changed since it was digested",
                             path=spec.path, expected=spec.file_sha256)
    return delta_modules.build_from_file(spec.path, spec.name, spec.file_sha256 or "", stock)


def install_delta(model: nn.Module, spec: DeltaSpec,
                  target_modules: Sequence[str] = DEFAULT_TARGET_MODULES, *,
                  prefix: str = "") -> list[str]:
    """Replaces every module whose name matches a pattern with its candidate; returns names.

    ``prefix`` is the name of ``model`` inside the full model when a hook installs the
    delta from a sub-module (patterns are always full names such as ``model.layers.*.mlp``).
    """
    def full(relative: str) -> str:
        return f"{prefix}.{relative}" if prefix and relative else (prefix or relative)

    matched = [(relative, module) for relative, module in model.named_modules()
               if relative and any(fnmatch.fnmatch(full(relative), p) for p in target_modules)]
    for relative, module in matched:
        parent_name, _, child = relative.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, build_candidate(spec, module))
    return [full(relative) for relative, _ in matched]
