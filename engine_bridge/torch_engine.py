"""Runs the reference Llama in-process on CPU: the torch implementation of the engine port.

Each lane is a deep copy of the pristine model loaded once from the HF folder, so no
lane can disturb another's weights. Generation is greedy with a KV cache, one batch of
the replay slice at a time, single-threaded, and bit-identical across runs. Candidate
lanes have their delta installed by module replacement; audit lanes carry the shared
SGLang-style hooks. Untrusted file deltas belong in
:class:`engine_bridge.subprocess_lane.SubprocessEngine` (they run arbitrary code), so this
engine refuses them unless ``trust_file_deltas`` is set.
"""

from __future__ import annotations

import copy
import inspect
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from engine_bridge.threads import pin_single_thread_env, pin_torch_threads

pin_single_thread_env()  # before torch: no-op if the process already imported torch

import torch  # noqa: E402  (thread variables must be set first)

from engine_bridge.deltas import DEFAULT_TARGET_MODULES, DeltaSpec, install_delta  # noqa: E402
from engine_bridge.hooks import (  # noqa: E402
    AuditSpec,
    NodeTally,
    audit_hook_specs,
    close_session,
    register_forward_hooks,
    session_for,
)
from engine_bridge.prompt_slice import ReplaySlice  # noqa: E402
from engine_bridge.protocol import (  # noqa: E402
    STAGE_SPEED,
    Clock,
    FaultCode,
    RequestTiming,
    TokenScores,
    WindowRun,
    default_clock,
    engine_fault,
    wrap_unexpected,
)
from engine_bridge.reference_model import (  # noqa: E402
    REFERENCE_WEIGHTS_SHA256,
    load_reference_model,
)
from vocabulary.errors import InvalidInput  # noqa: E402

pin_torch_threads(torch)
torch.use_deterministic_algorithms(True)

__all__ = ["KillHandler", "TorchLane", "TorchReferenceEngine"]

#: Called by a lane whose ``engine_kill`` control fires; must not return normally.
KillHandler = Callable[["TorchLane", int], None]


def _raise_killed(lane: TorchLane, window: int) -> None:
    # In-process there is no process to kill without killing the validator too, so the
    # control is simulated; SubprocessEngine really sends SIGKILL.
    raise engine_fault(FaultCode.ENGINE_KILLED, f"lane {lane.lane_id} killed in window "
                       f"{window} (simulated in-process)", stage=lane.stage)


class TorchReferenceEngine:
    """Boots in-process CPU lanes of the reference Llama."""

    runtime = "torch-reference"

    def __init__(self, model_dir: str | os.PathLike[str], *,
                 expected_weights_sha256: str | None = REFERENCE_WEIGHTS_SHA256,
                 clock: Clock = default_clock,
                 target_modules: Sequence[str] = DEFAULT_TARGET_MODULES,
                 trust_file_deltas: bool = False,
                 on_kill: KillHandler = _raise_killed) -> None:
        self.model_dir = os.fspath(model_dir)
        self.expected_weights_sha256 = expected_weights_sha256
        self.clock = clock
        self.target_modules = tuple(target_modules)
        self.trust_file_deltas = trust_file_deltas
        self.on_kill = on_kill
        self._template: torch.nn.Module | None = None
        self.lanes: list[TorchLane] = []

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = STAGE_SPEED) -> TorchLane:
        """Boots a lane now (in-process boot takes milliseconds); ``ready()`` is a no-op."""
        for spec in (delta, audit.candidate if audit else None):
            if spec is not None:
                self.check_candidate(spec)
        try:
            if self._template is None:
                self._template = load_reference_model(
                    self.model_dir, expected_sha256=self.expected_weights_sha256)
            model = copy.deepcopy(self._template)
            lane = TorchLane(self, lane_id, model, delta, audit, stage)
        except Exception as exc:
            raise engine_fault(FaultCode.ADAPTER_START_FAILED,
                               f"lane {lane_id} failed to boot: {type(exc).__name__}: {exc}",
                               stage=stage) from exc
        self.lanes.append(lane)
        return lane

    def check_candidate(self, delta: DeltaSpec) -> None:
        """Refuses a file delta unless ``trust_file_deltas`` (it would run in this process)."""
        if delta.kind == "file" and not self.trust_file_deltas:
            raise InvalidInput("file deltas run arbitrary code; boot them in a "
                               "SubprocessEngine or pass trust_file_deltas=True",
                               path=delta.path)

    def shutdown(self) -> None:
        """Shuts every lane down and drops the template model."""
        for lane in list(self.lanes):
            lane.shutdown()
        self._template = None


def _cache_keyword() -> str:
    from transformers import LlamaForCausalLM

    params = inspect.signature(LlamaForCausalLM.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


_CACHE_KW = _cache_keyword()


class TorchLane:
    """Is one in-process reference model: stock, with one delta, or with the audit hook."""

    def __init__(self, engine: TorchReferenceEngine, lane_id: str, model: torch.nn.Module,
                 delta: DeltaSpec | None, audit: AuditSpec | None, stage: str) -> None:
        self.engine = engine
        self.lane_id = lane_id
        self.model = model
        self.delta = delta
        self.audit = audit
        self.stage = stage
        self.boot_id = uuid.uuid4().hex
        self.installed: list[str] = []
        self._handles: list[Any] = []
        if delta is not None:
            self.installed = install_delta(model, delta, engine.target_modules)
        if audit is not None:
            self._handles = register_forward_hooks(model, audit_hook_specs(audit))

    def ready(self) -> None:
        """Returns at once: the lane booted in its constructor."""

    def run_window(self, replay: ReplaySlice, *, window: int = 0) -> WindowRun:
        """Serves the slice batch by batch and returns cost, tokens and per-request timings."""
        self._maybe_restart(window)
        try:
            return self._run(replay, window)
        except Exception as exc:
            raise wrap_unexpected(exc, stage=self.stage,
                                  code=FaultCode.ADAPTER_REQUEST_FAILED) from exc

    def _run(self, replay: ReplaySlice, window: int) -> WindowRun:
        clock = self.engine.clock
        outputs: list[tuple[int, ...]] = []
        timings: list[RequestTiming] = []
        start = clock()
        for batch_index, batch in enumerate(replay.batches()):
            prompts = torch.tensor([replay.requests[i] for i in batch], dtype=torch.long)
            ids, first_ns = self._generate(prompts, replay.max_new_tokens)
            done_ns = clock()
            for row, request in enumerate(batch):
                outputs.append(tuple(int(t) for t in ids[row]))
                timings.append(RequestTiming(request, first_ns - start, done_ns - start,
                                             int(ids.shape[1])))
            self._maybe_kill(window, batch_index)
        return WindowRun(clock() - start, tuple(outputs), tuple(timings), self.boot_id)

    def _generate(self, prompts: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, int]:
        with torch.inference_mode():
            out = self.model(input_ids=prompts, use_cache=True)
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            first_ns = self.engine.clock()
            tokens = [token]
            for _ in range(max_new_tokens - 1):
                cache = getattr(out, _CACHE_KW)
                out = self.model(input_ids=token, use_cache=True, **{_CACHE_KW: cache})
                token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                tokens.append(token)
        return torch.cat(tokens, dim=1), first_ns

    def _control_window(self, name: str) -> int | None:
        if self.delta is None or self.delta.kind != "registered" or self.delta.name != name:
            return None
        return self.delta.param_int("window")

    def _maybe_restart(self, window: int) -> None:
        if window > 0 and window == self._control_window("pod_restart"):
            self.boot_id = uuid.uuid4().hex  # the service came back as a new instance

    def _maybe_kill(self, window: int, batch_index: int) -> None:
        if window > 0 and batch_index == 0 and window == self._control_window("engine_kill"):
            self.engine.on_kill(self, window)

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        """Scores each sequence teacher-forced in one forward (no cache)."""
        try:
            return [self._score_one(seq, first) for seq, first in
                    zip(sequences, first_scored, strict=True)]
        except Exception as exc:
            raise wrap_unexpected(exc, stage=self.stage,
                                  code=FaultCode.ADAPTER_REQUEST_FAILED) from exc

    def _score_one(self, sequence: Sequence[int], first: int) -> TokenScores:
        ids = torch.tensor([list(sequence)], dtype=torch.long)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, use_cache=False).logits[0]
        # Position p predicts token p + 1: the scored tokens are sequence[first:].
        window = logits[first - 1: len(sequence) - 1].to(torch.float64)
        logprobs = torch.log_softmax(window, dim=-1)
        teacher = ids[0, first:].unsqueeze(-1)
        return TokenScores(tuple(int(t) for t in window.argmax(dim=-1)),
                           tuple(float(v) for v in logprobs.gather(-1, teacher).squeeze(-1)))

    def audit_tallies(self) -> list[NodeTally]:
        """Returns this lane's audit tallies (empty for a lane without the audit hook)."""
        if self.audit is None:
            return []
        return session_for(self.audit.to_config()).snapshot()

    def shutdown(self) -> None:
        """Removes hooks, forgets the audit session and releases the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self.audit is not None:
            close_session(self.audit.session)
        if self in self.engine.lanes:
            self.engine.lanes.remove(self)
