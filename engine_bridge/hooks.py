"""Audits a node by forward hooks that follow SGLang's ``forward_hooks`` interface.

SGLang's server argument ``forward_hooks`` is a list of specs
``{"name", "target_modules": [fnmatch patterns on module names], "hook_factory":
"pkg.module:factory", "config": {...}, "hook_type": "forward" | "forward_pre"}``; for each
spec it calls ``factory(config)`` once and registers the returned hook, called as
``hook(module, args, output)``, on every module whose name matches. This module ships
such factories, so one hook serves both engines: :func:`register_forward_hooks` applies
the same specs to the torch reference model.

For every call of an audited node the candidate module (built from that stock module)
runs on the stock input; the call's score is ``1 - ||c - r||2 / ||r||2`` floored at 0,
computed in float64 (r = stock output, c = candidate output). A call is a violation when
its score is below ``bar - near_miss_band``, a near miss when below ``bar`` but within the
band, uncomparable when either output holds NaN/Inf, the shapes differ, or the candidate's
own computation raises. A failure of the host instead (out of memory, I/O, the delta that
can no longer be built) grades nothing: the tally notes it and :func:`tallies_to_payloads`
raises ``unproven_infrastructure_failure``, so it never becomes a miner's FAIL. The hook
never changes the stock output. Tallies are kept per node (module name) and rank;
scheduler processes also write them to receipt files. Torch is imported lazily.

Hooks get no module names, so a pre-hook on the anchor module ``model`` (the decoder stack)
names every module on the first forward; the anchor, not the root, because SGLang calls
the root's ``forward`` directly and root hooks would never fire. The same anchor carries
the receipt writer and, on SGLang candidate lanes, the delta installer.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine_bridge.deltas import DEFAULT_TARGET_MODULES, DeltaSpec, build_candidate, install_delta
from engine_bridge.grading import (
    DEFAULT_BAR,
    DEFAULT_NEAR_MISS_BAND,
    AuditSpec,
    NodeTally,
    classify,
)
from engine_bridge.protocol import (
    STAGE_AUDIT,
    Engine,
    FaultCode,
    engine_fault,
    wrap_unexpected,
)
from vocabulary.errors import LedgerError

if TYPE_CHECKING:
    from torch import Tensor, nn

    from engine_bridge.prompt_slice import ReplaySlice

__all__ = [
    "ANCHOR_MODULE",
    "DEFAULT_BAR",
    "DEFAULT_NEAR_MISS_BAND",
    "AuditSpec",
    "NodeTally",
    "audit_hook_factory",
    "audit_hook_specs",
    "classify",
    "close_session",
    "delta_install_specs",
    "delta_installer_factory",
    "is_infrastructure_error",
    "name_binder_factory",
    "read_install_receipts",
    "read_receipts",
    "receipt_flush_factory",
    "register_forward_hooks",
    "resolve_callable",
    "run_audit",
    "score_outputs",
    "session_for",
    "tallies_to_payloads",
]

#: Module that carries the per-forward hooks. SGLang calls the root's ``forward`` directly
#: (root hooks never fire) but the decoder stack ``model`` through ``__call__``.
ANCHOR_MODULE = "model"
_HOOKS_PATH = "engine_bridge.hooks"


def score_outputs(candidate: Tensor, stock: Tensor) -> float | None:
    """Returns 1 - ||c - r|| / ||r|| floored at 0 in float64, or None if uncomparable."""
    import torch

    if candidate.shape != stock.shape:
        return None
    c = candidate.detach().to(torch.float64)
    r = stock.detach().to(torch.float64)
    if not bool(torch.isfinite(c).all()) or not bool(torch.isfinite(r).all()):
        return None
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(c - r))
    if ref_norm == 0.0:
        return 1.0 if diff_norm == 0.0 else 0.0
    return max(0.0, 1.0 - diff_norm / ref_norm)


def is_infrastructure_error(exc: BaseException) -> bool:
    """Says whether ``exc`` is a failure of the host rather than of the candidate's code.

    Memory exhaustion (host or device), I/O and this project's own errors depend on the
    machine and the files it reads, not on what the candidate computes; a CUDA
    ``AcceleratorError`` also poisons the device for every later call. Whether the candidate
    provoked them (a huge allocation, say) cannot be proven here, so they are never graded
    as its output: the audit faults with ``unproven_infrastructure_failure`` (HOLD), and an
    operator attributes it. Every other exception is the candidate's computation failing.
    """
    import torch

    host: tuple[type[BaseException], ...] = (
        LedgerError, MemoryError, OSError, torch.OutOfMemoryError)
    accelerator = getattr(torch, "AcceleratorError", None)
    if isinstance(accelerator, type):
        host = (*host, accelerator)
    return isinstance(exc, host)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _first_tensor(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) else value


def _current_rank(config: Mapping[str, Any]) -> int:
    if "rank" in config:
        return int(config["rank"])
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class AuditSession:
    """Holds one audit's state inside one process: node names, candidates and tallies."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.spec = AuditSpec.from_config(config)
        self.bar = Decimal(self.spec.bar)
        self.band = Decimal(self.spec.near_miss_band)
        self.rank = _current_rank(config)
        self.names: dict[int, str] = {}
        self.candidates: dict[int, nn.Module] = {}
        self.tallies: dict[str, NodeTally] = {}

    def bind_names(self, anchor: nn.Module, prefix: str = ANCHOR_MODULE) -> None:
        """Names every module under the anchor and opens a zero tally per audited node."""
        for relative, module in anchor.named_modules():
            name = f"{prefix}.{relative}" if relative else prefix
            self.names.setdefault(id(module), name)
            if name and any(fnmatch.fnmatch(name, p) for p in self.spec.target_modules):
                self.tallies.setdefault(name, NodeTally(name, self.rank))

    def observe(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        """Runs the candidate on the stock input of one call and tallies its score."""
        import torch

        name = self.names.get(id(module)) or f"unbound.{type(module).__name__}.{id(module):x}"
        tally = self.tallies.setdefault(name, NodeTally(name, self.rank))
        try:
            candidate = self.candidates.get(id(module))
            if candidate is None:
                candidate = self.candidates[id(module)] = build_candidate(
                    self.spec.candidate, module)
        except Exception as exc:
            # The speed stage built this candidate already, so failing now (the delta file
            # changed, weights unreadable) is the host's failure, not the candidate's output.
            tally.infrastructure_error = tally.infrastructure_error or _describe(exc)
            return
        try:
            with torch.inference_mode():
                produced = _first_tensor(candidate(*args))
            score = score_outputs(produced, _first_tensor(output))
        except Exception as exc:
            if is_infrastructure_error(exc):
                tally.infrastructure_error = tally.infrastructure_error or _describe(exc)
                return  # the hook must not break the stock forward; the audit faults later
            # Stock computed this very input without error, so any other exception is the
            # candidate's own computation failing on it (or its output being unscorable).
            tally.first_error = tally.first_error or _describe(exc)
            score = None
        tally.record(score, self.bar, self.band)

    def snapshot(self) -> list[NodeTally]:
        """Returns copies of the tallies in node order."""
        return [NodeTally(**asdict(t)) for t in sorted(self.tallies.values(), key=_node_key)]

    def flush(self) -> None:
        """Writes this process's tallies to its receipt file atomically (if configured)."""
        if self.spec.receipts_dir is None:
            return
        body = {"session": self.spec.session, "rank": self.rank, "pid": os.getpid(),
                "tallies": [asdict(t) for t in self.snapshot()]}
        _write_atomic(_receipt_path(self.spec.receipts_dir, "audit", self.spec.session,
                                    self.rank), body)


_SESSIONS: dict[str, AuditSession] = {}


def session_for(config: Mapping[str, Any]) -> AuditSession:
    """Returns the process-wide session named in ``config`` (factories share it)."""
    key = str(config["session"])
    if key not in _SESSIONS:
        _SESSIONS[key] = AuditSession(config)
    return _SESSIONS[key]


def close_session(session: str) -> None:
    """Forgets a session's state in this process."""
    _SESSIONS.pop(session, None)


def _node_key(tally: NodeTally) -> tuple[Any, ...]:
    parts = re.split(r"(\d+)", tally.node)
    return (tuple(int(p) if p.isdigit() else p for p in parts), tally.rank)


def _receipt_path(directory: str, kind: str, session: str, rank: int) -> Path:
    return Path(directory) / f"{kind}-{session}-rank{rank}-pid{os.getpid()}.json"


def _write_atomic(path: Path, body: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


Hook = Callable[..., Any]


def audit_hook_factory(config: Mapping[str, Any]) -> Hook:
    """Returns the forward hook ``(module, args, output)`` that audits each call."""
    session = session_for(config)

    def audit_hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        session.observe(module, args, output)

    return audit_hook


def name_binder_factory(config: Mapping[str, Any]) -> Hook:
    """Returns an anchor forward-pre hook that names modules once (hooks get no names)."""
    session = session_for(config)
    bound: list[bool] = []

    def bind_names(module: nn.Module, args: tuple[Any, ...]) -> None:
        if not bound:
            session.bind_names(module, config.get("anchor", ANCHOR_MODULE))
            bound.append(True)

    return bind_names


def receipt_flush_factory(config: Mapping[str, Any]) -> Hook:
    """Returns an anchor forward hook that writes the receipt after every model forward."""
    session = session_for(config)

    def flush_receipt(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        session.flush()

    return flush_receipt


def delta_installer_factory(config: Mapping[str, Any]) -> Hook:
    """Returns an anchor forward-pre hook that installs the delta before the first forward.

    This is how an SGLang candidate lane gets its delta: the engine has no module swap
    option, but every forward (CUDA graph capture included) enters the anchor first.
    """
    spec = DeltaSpec.from_dict(config["delta"])
    patterns = tuple(config["target_modules"])
    installed: list[str] = []

    def install(module: nn.Module, args: tuple[Any, ...]) -> None:
        if installed:
            return
        prefix = config.get("anchor", ANCHOR_MODULE)
        installed.extend(install_delta(module, spec, patterns, prefix=prefix)
                         or ["<none matched>"])
        if config.get("receipts_dir"):
            body = {"session": config["session"], "pid": os.getpid(), "nodes": installed,
                    "delta_digest": spec.digest}
            _write_atomic(_receipt_path(config["receipts_dir"], "install", config["session"],
                                        _current_rank(config)), body)

    return install


def resolve_callable(path: str) -> Callable[..., Any]:
    """Imports ``pkg.module:name`` (or ``pkg.module.name``) like SGLang's hook manager."""
    if ":" in path:
        module_name, attr = path.split(":", 1)
    else:
        module_name, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]


def register_forward_hooks(model: nn.Module, specs: Iterable[Mapping[str, Any]]) -> list[Any]:
    """Applies SGLang-style hook specs to a torch model; returns the removable handles."""
    handles = []
    named = list(model.named_modules())
    for spec in specs:
        hook = resolve_callable(spec["hook_factory"])(spec.get("config") or {})
        for name, module in named:
            if not any(fnmatch.fnmatch(name, p) for p in spec["target_modules"]):
                continue
            if spec.get("hook_type", "forward") == "forward_pre":
                handles.append(module.register_forward_pre_hook(hook))
            else:
                handles.append(module.register_forward_hook(hook))
    return handles


def audit_hook_specs(spec: AuditSpec) -> list[dict[str, Any]]:
    """Returns the ``forward_hooks`` server argument that audits ``spec`` on a stock engine.

    The anchor module (``model``) gets a pre-hook that binds module names and, when
    receipts are configured, a post-hook that writes the receipt after each forward.
    """
    config = {**spec.to_config(), "anchor": ANCHOR_MODULE}
    specs = [
        {"name": "arena-audit-names", "target_modules": [ANCHOR_MODULE],
         "hook_type": "forward_pre",
         "hook_factory": f"{_HOOKS_PATH}:name_binder_factory", "config": config},
        {"name": "arena-audit", "target_modules": list(spec.target_modules),
         "hook_factory": f"{_HOOKS_PATH}:audit_hook_factory", "config": config},
    ]
    if spec.receipts_dir is not None:
        specs.append({"name": "arena-audit-receipt", "target_modules": [ANCHOR_MODULE],
                      "hook_factory": f"{_HOOKS_PATH}:receipt_flush_factory",
                      "config": config})
    return specs


def delta_install_specs(delta: DeltaSpec, *, target_modules: Sequence[str] =
                        DEFAULT_TARGET_MODULES, receipts_dir: str | None = None,
                        session: str | None = None) -> list[dict[str, Any]]:
    """Returns the ``forward_hooks`` server argument that installs ``delta`` (candidate lane)."""
    config = {"delta": delta.to_dict(), "target_modules": list(target_modules),
              "receipts_dir": receipts_dir, "session": session or uuid.uuid4().hex,
              "anchor": ANCHOR_MODULE}
    return [{"name": "arena-delta-install", "target_modules": [ANCHOR_MODULE],
             "hook_type": "forward_pre",
             "hook_factory": f"{_HOOKS_PATH}:delta_installer_factory", "config": config}]


def read_receipts(receipts_dir: str, session: str) -> list[NodeTally]:
    """Merges every audit receipt of ``session`` (one per scheduler process) by node and rank."""
    merged: dict[tuple[str, int], NodeTally] = {}
    for path in sorted(Path(receipts_dir).glob(f"audit-{session}-rank*.json")):
        body = json.loads(path.read_text(encoding="utf-8"))
        for row in body["tallies"]:
            tally = NodeTally(**row)
            key = (tally.node, tally.rank)
            if key in merged:
                merged[key].merge(tally)
            else:
                merged[key] = tally
    return sorted(merged.values(), key=_node_key)


def read_install_receipts(receipts_dir: str, session: str) -> list[dict[str, Any]]:
    """Returns the install receipts of ``session`` (which nodes each process replaced)."""
    paths = sorted(Path(receipts_dir).glob(f"install-{session}-rank*.json"))
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def tallies_to_payloads(tallies: Iterable[NodeTally], bar: str) -> list[dict[str, Any]]:
    """Returns one AuditNodeGraded payload per node and rank, in node order.

    Raises EngineFault ``unproven_infrastructure_failure`` (stage "audit") when a tally
    notes a host failure: a call that could not be compared is missing evidence, and
    grading the rest would hide it.
    """
    ordered = sorted(tallies, key=_node_key)
    for tally in ordered:
        if tally.infrastructure_error is not None:
            raise engine_fault(FaultCode.UNPROVEN_INFRASTRUCTURE_FAILURE,
                               f"the audit could not compare a call of {tally.node} (rank "
                               f"{tally.rank}): {tally.infrastructure_error}",
                               stage=STAGE_AUDIT, node=tally.node, rank=tally.rank)
    return [t.to_payload(bar) for t in ordered]


def run_audit(engine: Engine, candidate: DeltaSpec, replay: ReplaySlice, *,
              target_modules: Sequence[str] = DEFAULT_TARGET_MODULES, bar: str = DEFAULT_BAR,
              near_miss_band: str = DEFAULT_NEAR_MISS_BAND,
              receipts_dir: str | None = None) -> list[dict[str, Any]]:
    """Runs the slice once on a stock lane with the audit hook; returns AuditNodeGraded payloads.

    An empty list means no node was graded (the machine decides ``audit_not_covered``).
    Raises EngineFault (stage "audit") when the lane fails or its evidence is missing; any
    other exception from a lane becomes ``unproven_infrastructure_failure``.
    """
    spec = AuditSpec(candidate, tuple(target_modules), bar, near_miss_band,
                     receipts_dir=receipts_dir)
    try:
        lane = engine.boot_lane("audit", None, audit=spec, stage=STAGE_AUDIT)
        try:
            lane.ready()
            lane.run_window(replay)
            tallies = lane.audit_tallies()
        finally:
            lane.shutdown()
        return tallies_to_payloads(tallies, bar)
    except LedgerError:
        raise
    except Exception as exc:
        raise wrap_unexpected(exc, stage=STAGE_AUDIT,
                              code=FaultCode.UNPROVEN_INFRASTRUCTURE_FAILURE) from exc
