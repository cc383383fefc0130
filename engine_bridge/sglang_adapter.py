"""Runs lanes on SGLang (GPU hosts) behind the same engine port as the reference engine.

Each lane is one ``sglang.Engine`` inside its own lane process (the
:mod:`engine_bridge.subprocess_lane` host, spawned and non-daemonic because SGLang starts
scheduler processes of its own), so a dead engine surfaces as ``engine_killed`` and two
lanes never share SGLang's process-global state. In the lane process the commission's
``engine_env`` is exported *before* sglang is imported, and the commission's
``engine_config`` becomes ``sglang.Engine`` keyword arguments after it passed an allowlist
of ServerArgs keys (:func:`validate_engine_config`, checked before anything boots and
usable at commissioning time). The bridge itself sets the model path, token-id input,
greedy sampling and the ``forward_hooks``: the candidate lane gets the delta installer,
the audit lane gets the audit hook with radix cache and CUDA graphs off (hooks do not run
inside a replayed graph). Scheduler processes hand their audit tallies and install
receipts back through files in a receipts folder. sglang is imported lazily.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from engine_bridge.decimals import parse_decimal
from engine_bridge.deltas import DEFAULT_TARGET_MODULES, DeltaSpec
from engine_bridge.hooks import (
    AuditSpec,
    NodeTally,
    audit_hook_specs,
    delta_install_specs,
    read_install_receipts,
    read_receipts,
)
from engine_bridge.limits import boot_timeout_s, window_timeout_s
from engine_bridge.prompt_slice import ReplaySlice
from engine_bridge.protocol import (
    STAGE_SPEED,
    Clock,
    FaultCode,
    RequestTiming,
    TokenScores,
    WindowRun,
    default_clock,
    engine_fault,
)
from engine_bridge.subprocess_lane import SubprocessEngine, SubprocessLane
from vocabulary.errors import InvalidInput

__all__ = [
    "AUDIT_LANE_OVERRIDES",
    "BRIDGE_OWNED_SERVER_ARGS",
    "SERVER_ARG_KINDS",
    "SGLANG_LANE_FACTORY",
    "SGLangEngine",
    "SGLangLane",
    "boot_sglang_lane",
    "server_args_for_lane",
    "validate_engine_config",
    "validate_engine_env",
]

SGLANG_LANE_FACTORY = "engine_bridge.sglang_adapter:boot_sglang_lane"

#: ServerArgs keys a commission may set, with the JSON kind each must have. Decimal
#: values arrive as decimal strings (ledger payloads hold no floats) and become floats.
SERVER_ARG_KINDS: Mapping[str, str] = {
    "dtype": "str", "kv_cache_dtype": "str", "quantization": "str", "load_format": "str",
    "context_length": "int", "tp_size": "int", "page_size": "int",
    "mem_fraction_static": "decimal", "max_running_requests": "int",
    "max_total_tokens": "int", "chunked_prefill_size": "int", "max_prefill_tokens": "int",
    "schedule_policy": "str", "schedule_conservativeness": "decimal",
    "attention_backend": "str", "sampling_backend": "str", "cuda_graph_max_bs": "int",
    "disable_cuda_graph": "bool", "disable_radix_cache": "bool",
    "disable_overlap_schedule": "bool", "enable_torch_compile": "bool",
    "torch_compile_max_bs": "int", "random_seed": "int",
    "enable_deterministic_inference": "bool", "triton_attention_reduce_in_fp32": "bool",
    "num_continuous_decode_steps": "int", "stream_interval": "int",
}
#: Keys the bridge sets itself; a commission naming one is refused, not overridden.
BRIDGE_OWNED_SERVER_ARGS = frozenset({
    "model_path", "tokenizer_path", "skip_tokenizer_init", "forward_hooks", "base_gpu_id",
    "host", "port", "log_level", "trust_remote_code", "dp_size",
})
#: What the audit lane forces: every call through eager Python, no prefix reuse.
AUDIT_LANE_OVERRIDES: Mapping[str, Any] = {"disable_radix_cache": True,
                                           "disable_cuda_graph": True}
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_KIND_TYPES: Mapping[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,),
                                               "decimal": (str,)}


def validate_engine_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Returns ``sglang.Engine`` keyword arguments for a commission's engine_config.

    Raises InvalidInput naming every unknown or bridge-owned key, or a value of the wrong
    kind; nothing is booted. Decimal strings become floats here, at the engine edge.
    """
    owned = sorted(set(config) & BRIDGE_OWNED_SERVER_ARGS)
    unknown = sorted(set(config) - set(SERVER_ARG_KINDS) - BRIDGE_OWNED_SERVER_ARGS)
    if owned or unknown:
        raise InvalidInput(
            "engine_config refused: "
            + (f"unknown ServerArgs key(s) {unknown}; " if unknown else "")
            + (f"key(s) {owned} are set by the bridge; " if owned else "")
            + f"allowed keys: {sorted(SERVER_ARG_KINDS)}", unknown=unknown, owned=owned)
    kwargs: dict[str, Any] = {}
    for key, value in sorted(config.items()):
        kind = SERVER_ARG_KINDS[key]
        ok = isinstance(value, _KIND_TYPES[kind]) and not (kind == "int" and isinstance(
            value, bool))
        if not ok:
            raise InvalidInput(f"engine_config.{key} must be a {kind}, got {value!r}", key=key)
        kwargs[key] = float(parse_decimal(value, field=key)) if kind == "decimal" else value
    return kwargs


def validate_engine_env(env: Mapping[str, Any]) -> dict[str, str]:
    """Returns the commission's engine_env after checking names and string values."""
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key) or not isinstance(value, str):
            raise InvalidInput(f"engine_env entry {key!r} must be an UPPER_CASE name with a "
                               "string value", key=key)
    return dict(env)


def server_args_for_lane(model_path: str, engine_kwargs: Mapping[str, Any], *,
                         delta: DeltaSpec | None, audit: AuditSpec | None,
                         target_modules: Sequence[str], receipts_dir: str, session: str,
                         gpu: int | None) -> dict[str, Any]:
    """Returns the full ``sglang.Engine`` keyword arguments of one lane (pure; no sglang)."""
    kwargs: dict[str, Any] = {**engine_kwargs, "model_path": model_path,
                              "skip_tokenizer_init": True, "log_level": "error"}
    if gpu is not None:
        kwargs["base_gpu_id"] = gpu
    if audit is not None:
        kwargs |= AUDIT_LANE_OVERRIDES
        kwargs["forward_hooks"] = audit_hook_specs(audit)
    elif delta is not None:
        kwargs["forward_hooks"] = delta_install_specs(
            delta, target_modules=target_modules, receipts_dir=receipts_dir, session=session)
    return kwargs


class SGLangEngine(SubprocessEngine):
    """Boots SGLang lanes, one ``sglang.Engine`` per lane process."""

    runtime = "sglang"

    def __init__(self, model_path: str, engine_config: Mapping[str, Any],
                 engine_env: Mapping[str, Any] | None = None, *,
                 target_modules: Sequence[str] = DEFAULT_TARGET_MODULES,
                 receipts_root: str | None = None, lane_gpus: Mapping[str, int] | None = None,
                 boot_timeout_s: float = boot_timeout_s,
                 window_timeout_s: float = window_timeout_s) -> None:
        engine_kwargs = validate_engine_config(engine_config)  # before anything boots
        env = validate_engine_env(engine_env or {})
        root = receipts_root or tempfile.mkdtemp(prefix="arena-receipts-")
        super().__init__(model_path, expected_weights_sha256=None,
                         target_modules=target_modules, boot_timeout_s=boot_timeout_s,
                         window_timeout_s=window_timeout_s, cpu_affinity=None,
                         start_method="spawn", lane_factory=SGLANG_LANE_FACTORY,
                         factory_config={"engine_kwargs": engine_kwargs, "engine_env": env,
                                         "receipts_root": root,
                                         "lane_gpus": dict(lane_gpus or {})},
                         daemon=False)

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = STAGE_SPEED) -> SubprocessLane:
        """Starts a lane process that boots ``sglang.Engine``; receipts go under the root."""
        if audit is not None and audit.receipts_dir is None:
            receipts = os.path.join(self.factory_config["receipts_root"], audit.session)
            audit = AuditSpec(audit.candidate, audit.target_modules, audit.bar,
                              audit.near_miss_band, audit.session, receipts)
        return super().boot_lane(lane_id, delta, audit=audit, stage=stage)


def boot_sglang_lane(config: Mapping[str, Any]) -> SGLangLane:
    """Boots one SGLang lane inside a lane process (exports engine_env, then imports sglang)."""
    os.environ.update(config["engine_env"])
    import sglang

    delta = DeltaSpec.from_dict(config["delta"]) if config["delta"] else None
    audit = AuditSpec.from_config(config["audit"]) if config["audit"] else None
    session = audit.session if audit else uuid.uuid4().hex
    receipts_dir = (audit.receipts_dir if audit and audit.receipts_dir
                    else os.path.join(config["receipts_root"], session))
    os.makedirs(receipts_dir, exist_ok=True)
    kwargs = server_args_for_lane(
        config["model_dir"], config["engine_kwargs"], delta=delta, audit=audit,
        target_modules=config["target_modules"], receipts_dir=receipts_dir, session=session,
        gpu=config["lane_gpus"].get(config["lane_id"]))
    engine = sglang.Engine(**kwargs)
    return SGLangLane(engine, config["lane_id"], config["stage"], delta, audit,
                      receipts_dir, session)


class SGLangLane:
    """Serves the lane commands with one ``sglang.Engine`` (runs inside the lane process)."""

    def __init__(self, engine: Any, lane_id: str, stage: str, delta: DeltaSpec | None,
                 audit: AuditSpec | None, receipts_dir: str, session: str,
                 clock: Clock = default_clock) -> None:
        self.engine = engine
        self.lane_id = lane_id
        self.stage = stage
        self.delta = delta
        self.audit = audit
        self.receipts_dir = receipts_dir
        self.session = session
        self.clock = clock
        self.boot_id = f"{os.getpid()}-{uuid.uuid4().hex}"
        self._children = self._child_pids()

    def _child_pids(self) -> set[int]:
        getter = getattr(self.engine, "get_all_child_pids", None)
        if getter is not None:
            return set(getter())
        return {p.pid for p in mp.active_children() if p.pid is not None}

    def _alive(self, pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def ready(self) -> None:
        """Returns at once: the engine booted in the lane factory."""

    def run_window(self, replay: ReplaySlice, *, window: int = 0) -> WindowRun:
        """Serves the slice batch by batch with greedy sampling and ``ignore_eos``."""
        flush = getattr(self.engine, "flush_cache", None)
        if flush is not None and window > 0:
            flush()  # every measured window does the full prefill work
        params = {"temperature": 0.0, "max_new_tokens": replay.max_new_tokens,
                  "ignore_eos": True}
        outputs: list[tuple[int, ...]] = []
        timings: list[RequestTiming] = []
        start = self.clock()
        for batch in replay.batches():
            results = self._generate(input_ids=[list(replay.requests[i]) for i in batch],
                                     sampling_params=params)
            done = self.clock() - start
            for request, result in zip(batch, results, strict=True):
                ids = tuple(int(t) for t in result["output_ids"])
                ttft_s = result.get("meta_info", {}).get("ttft")
                ttft = int(ttft_s * 1e9) if isinstance(ttft_s, (int, float)) else done
                outputs.append(ids)
                timings.append(RequestTiming(request, ttft, done, len(ids)))
        cost = self.clock() - start
        self._check_installed()
        return WindowRun(cost, tuple(outputs), tuple(timings), self.boot_id)

    def _generate(self, **kwargs: Any) -> list[dict[str, Any]]:
        try:
            result = self.engine.generate(**kwargs)
        except Exception as exc:
            dead = [pid for pid in self._children if not self._alive(pid)]
            code = FaultCode.ENGINE_KILLED if dead else FaultCode.ADAPTER_REQUEST_FAILED
            raise engine_fault(code, f"sglang lane {self.lane_id}: {type(exc).__name__}: "
                               f"{exc}" + (f" (dead scheduler pids {dead})" if dead else ""),
                               stage=self.stage) from exc
        return list(result) if isinstance(result, list) else [result]

    def _check_installed(self) -> None:
        if self.delta is None or self.audit is not None:
            return
        receipts = read_install_receipts(self.receipts_dir, self.session)
        if not receipts or any(r["nodes"] == ["<none matched>"] for r in receipts):
            raise engine_fault(FaultCode.EVIDENCE_UNAVAILABLE, f"sglang lane {self.lane_id}: "
                               "no receipt shows the delta installed", stage=self.stage)

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        """Scores teacher-forced sequences from SGLang's input-token log-probabilities."""
        results = self._generate(input_ids=[list(s) for s in sequences],
                                 sampling_params={"temperature": 0.0, "max_new_tokens": 1},
                                 return_logprob=True, logprob_start_len=0, top_logprobs_num=1)
        scores = []
        for result, first in zip(results, first_scored, strict=True):
            meta = result["meta_info"]
            teacher = meta["input_token_logprobs"][first:]
            top = meta["input_top_logprobs"][first:]
            scores.append(TokenScores(tuple(int(t[0][1]) for t in top),
                                      tuple(float(t[0]) for t in teacher)))
        return scores

    def audit_tallies(self) -> list[NodeTally]:
        """Reads the scheduler processes' receipt files; none is evidence_unavailable."""
        if self.audit is None:
            return []
        deadline = time.monotonic() + 5.0  # receipts are renamed into place, never partial
        while True:
            tallies = read_receipts(self.receipts_dir, self.session)
            if tallies or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not tallies:
            raise engine_fault(FaultCode.EVIDENCE_UNAVAILABLE, f"sglang audit lane wrote no "
                               f"receipt in {self.receipts_dir}", stage=self.stage)
        return tallies

    def shutdown(self) -> None:
        """Shuts the SGLang engine down."""
        self.engine.shutdown()
