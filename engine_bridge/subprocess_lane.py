"""Runs each reference lane in its own child process, so a dead engine is evidence, not a crash.

The child is started by a fresh interpreter (multiprocessing's ``forkserver`` with the
torch engine preloaded, or ``spawn``), so it inherits no state and no candidate code
from the validator. It pins its thread variables before importing torch, pins itself to
one CPU core only when asked (by default no lane is pinned, so lanes A and B are alike),
boots one :class:`~engine_bridge.torch_engine.TorchLane` and serves commands over a
pipe. The parent maps what it observes onto InfrastructureFault codes:

* the child exits or is killed while booting, or reports a boot error → ``adapter_start_failed``
* the child dies (any signal or exit) while serving a command → ``engine_killed``
* a boot or a command outlives its timeout → ``adapter_timeout`` (the child is killed)
* a command raises inside the child → ``adapter_request_failed`` (or the child's own code)

The ``engine_kill`` control delta really SIGKILLs its child in the middle of the window.
A Ctrl-C ends the children without a word (SIGINT keeps its default action in them): the
validator, which the terminal interrupts too, reports it and shuts them down.
The child builds its lane with a factory named by ``"module:function"``, so the SGLang
adapter reuses this host for its own lanes (spawned, non-daemonic: SGLang starts its
scheduler processes from the lane process).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, Literal

from engine_bridge.deltas import DEFAULT_TARGET_MODULES, DeltaSpec
from engine_bridge.hooks import AuditSpec, NodeTally
from engine_bridge.limits import boot_timeout_s, shutdown_timeout_s, window_timeout_s
from engine_bridge.prompt_slice import ReplaySlice
from engine_bridge.protocol import (
    STAGE_SPEED,
    FaultCode,
    TokenScores,
    WindowRun,
    engine_fault,
)
from engine_bridge.reference_spec import REFERENCE_WEIGHTS_SHA256
from vocabulary.errors import EngineFault

__all__ = ["REFERENCE_LANE_FACTORY", "SubprocessEngine", "SubprocessLane",
           "boot_reference_lane", "default_start_method"]

_POLL_INTERVAL_S = 0.02
REFERENCE_LANE_FACTORY = "engine_bridge.subprocess_lane:boot_reference_lane"
#: The lane's clock, named because a closure cannot cross into the child. ``thread_time``
#: counts only the lane thread's CPU time, so a busy neighbour does not inflate costs of
#: the single-threaded reference engine.
ClockName = Literal["perf_counter", "thread_time"]
_CLOCKS = {"perf_counter": time.perf_counter_ns, "thread_time": time.thread_time_ns}
Affinity = Mapping[str, int] | Literal["auto"] | None


def _auto_affinity() -> dict[str, int]:
    # No lane is pinned: both speed lanes may run on every core the validator may use, so
    # neither is stuck on a core that a neighbour's job or the disk interrupts keep busy
    # (pinned A and B once measured 2x apart in an A/A run). The arms run one at a time,
    # so the running lane always finds the least busy core.
    return {}


def default_start_method() -> str:
    """Returns "forkserver" where available (a lane boots without a fresh import), else "spawn".

    The fork server is itself a fresh interpreter that imports only the torch engine
    (threads pinned first); lanes are forked from it, so they inherit neither the
    validator's state nor any candidate's code, as with spawn, without re-importing
    torch and transformers (several seconds) for every lane.
    """
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


class SubprocessEngine:
    """Boots lanes in child processes; the same port as the in-process engine."""

    runtime = "torch-reference"

    def __init__(self, model_dir: str | os.PathLike[str], *,
                 expected_weights_sha256: str | None = REFERENCE_WEIGHTS_SHA256,
                 target_modules: Sequence[str] = DEFAULT_TARGET_MODULES,
                 boot_timeout_s: float = boot_timeout_s,
                 window_timeout_s: float = window_timeout_s,
                 cpu_affinity: Affinity = "auto",
                 start_method: str | None = None,
                 lane_factory: str = REFERENCE_LANE_FACTORY,
                 factory_config: Mapping[str, Any] | None = None,
                 daemon: bool = True, clock: ClockName = "perf_counter") -> None:
        self.start_method = start_method or default_start_method()
        if self.start_method == "forkserver" and lane_factory == REFERENCE_LANE_FACTORY:
            mp.get_context("forkserver").set_forkserver_preload(
                ["engine_bridge.lane_preload", "engine_bridge.torch_engine"])
        self.model_dir = os.fspath(model_dir)
        self.expected_weights_sha256 = expected_weights_sha256
        self.target_modules = tuple(target_modules)
        self.boot_timeout_s = boot_timeout_s
        self.window_timeout_s = window_timeout_s
        self.cpu_affinity = _auto_affinity() if cpu_affinity == "auto" else dict(
            cpu_affinity or {})
        self.lane_factory = lane_factory
        self.factory_config = dict(factory_config or {})
        self.daemon = daemon
        self.clock = clock
        self.lanes: list[SubprocessLane] = []

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = STAGE_SPEED) -> SubprocessLane:
        """Starts the child process and returns at once; ``ready()`` waits for the boot."""
        config = {**self.factory_config, "factory": self.lane_factory,
                  "model_dir": self.model_dir, "expected_sha256": self.expected_weights_sha256,
                  "target_modules": list(self.target_modules), "lane_id": lane_id,
                  "delta": delta.to_dict() if delta else None,
                  "audit": audit.to_config() if audit else None, "stage": stage,
                  "cpu": self.cpu_affinity.get(lane_id), "clock": self.clock}
        try:
            lane = SubprocessLane(self, lane_id, stage, config)
        except Exception as exc:  # the process could not even be started
            raise engine_fault(FaultCode.ADAPTER_START_FAILED, f"lane {lane_id} process did "
                               f"not start: {type(exc).__name__}: {exc}", stage=stage) from exc
        self.lanes.append(lane)
        return lane

    def check_candidate(self, delta: DeltaSpec) -> None:
        """Accepts every delta: each lane process is the sandbox a file delta needs."""

    def shutdown(self) -> None:
        """Stops every child this engine started."""
        for lane in list(self.lanes):
            lane.shutdown()


class SubprocessLane:
    """Is the parent's handle on one lane child process."""

    def __init__(self, engine: SubprocessEngine, lane_id: str, stage: str,
                 config: dict[str, Any]) -> None:
        self.engine = engine
        self.lane_id = lane_id
        self.stage = stage
        self.boot_id = ""
        ctx: Any = mp.get_context(engine.start_method)
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(child_conn, config),
                                 daemon=engine.daemon,
                                 name=f"arena-lane-{lane_id}")
        self._proc.start()
        child_conn.close()
        self._booted = False
        self._closed = False

    @property
    def pid(self) -> int | None:
        """Returns the child's process id."""
        pid: int | None = self._proc.pid
        return pid

    def ready(self) -> None:
        """Waits for the child's boot report; maps failures to start faults."""
        if self._booted:
            return
        reply = self._wait(self.engine.boot_timeout_s, booting=True)
        if reply[0] != "ready":
            self._kill()
            raise engine_fault(FaultCode.ADAPTER_START_FAILED,
                               f"lane {self.lane_id} failed to boot: {reply[3]}",
                               stage=self.stage)
        self.boot_id = reply[1]
        self._booted = True

    def run_window(self, replay: ReplaySlice, *, window: int = 0) -> WindowRun:
        """Runs the slice in the child; a death mid-window raises engine_killed."""
        result: WindowRun = self._call("run_window", replay.to_dict(), window)
        return result

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        """Scores teacher-forced sequences in the child."""
        result: list[TokenScores] = self._call(
            "score_tokens", [list(s) for s in sequences], list(first_scored))
        return result

    def audit_tallies(self) -> list[NodeTally]:
        """Returns the child's audit tallies."""
        result: list[NodeTally] = self._call("audit_tallies")
        return result

    def kill(self) -> None:
        """Sends SIGKILL to the child (tests and operators simulating a dead engine)."""
        if self._proc.pid is not None and self._proc.exitcode is None:
            os.kill(self._proc.pid, signal.SIGKILL)

    def shutdown(self) -> None:
        """Asks the child to exit, then kills it if it does not within the shutdown timeout."""
        if self._closed:
            return
        self._closed = True
        if self._proc.exitcode is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(("shutdown", ()))
            self._proc.join(shutdown_timeout_s)
        self._kill()
        self._conn.close()
        if self in self.engine.lanes:
            self.engine.lanes.remove(self)

    def _kill(self) -> None:
        if self._proc.exitcode is None:
            self._proc.kill()
            self._proc.join(shutdown_timeout_s)

    def _call(self, command: str, *args: Any) -> Any:
        self.ready()
        try:
            self._conn.send((command, args))
        except (BrokenPipeError, OSError) as exc:
            raise self._killed(command) from exc
        reply = self._wait(self.engine.window_timeout_s, booting=False, command=command)
        if reply[0] == "fault":
            raise engine_fault(FaultCode(reply[1]), reply[3], stage=reply[2])
        return reply[1]

    def _wait(self, timeout_s: float, *, booting: bool, command: str = "boot") -> tuple[Any, ...]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._conn.poll(_POLL_INTERVAL_S):
                try:
                    return tuple(self._conn.recv())
                except (EOFError, OSError):
                    break
            if self._proc.exitcode is not None and not self._conn.poll(0):
                break
        else:
            self._kill()
            raise engine_fault(FaultCode.ADAPTER_TIMEOUT, f"lane {self.lane_id}: {command} "
                               f"took longer than {timeout_s} s", stage=self.stage)
        self._proc.join(shutdown_timeout_s)
        if booting:
            return ("boot_failed", "", self.stage, f"child exited with code {self._proc.exitcode}")
        raise self._killed(command)

    def _killed(self, command: str) -> EngineFault:
        self._proc.join(shutdown_timeout_s)
        code = self._proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return engine_fault(FaultCode.ENGINE_KILLED, f"lane {self.lane_id} process died "
                            f"({how}) during {command}", stage=self.stage, exitcode=code)


def _sigkill_self(lane: Any, window: int) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def boot_reference_lane(config: Mapping[str, Any]) -> Any:
    """Boots a reference TorchLane inside a lane child (the default lane factory)."""
    from engine_bridge.threads import pin_single_thread_env

    pin_single_thread_env()
    if config.get("cpu") is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(config["cpu"])})
    from engine_bridge.torch_engine import TorchReferenceEngine

    engine = TorchReferenceEngine(config["model_dir"],
                                  expected_weights_sha256=config["expected_sha256"],
                                  target_modules=config["target_modules"],
                                  clock=_CLOCKS[config.get("clock", "perf_counter")],
                                  trust_file_deltas=True,  # this process is the sandbox
                                  on_kill=_sigkill_self)
    delta = DeltaSpec.from_dict(config["delta"]) if config["delta"] else None
    audit = AuditSpec.from_config(config["audit"]) if config["audit"] else None
    return engine.boot_lane(config["lane_id"], delta, audit=audit, stage=config["stage"])


def _serve(conn: Connection, lane: Any, stage: str) -> None:
    while True:
        try:
            command, args = conn.recv()
        except (EOFError, OSError):
            command, args = "shutdown", ()  # the parent went away: release the engine too
        if command == "shutdown":
            with contextlib.suppress(Exception):
                lane.shutdown()
            return
        try:
            if command == "run_window":
                result: Any = lane.run_window(ReplaySlice.from_dict(args[0]), window=args[1])
            elif command == "score_tokens":
                result = lane.score_tokens(args[0], args[1])
            elif command == "audit_tallies":
                result = lane.audit_tallies()
            else:
                raise ValueError(f"unknown lane command {command!r}")
            conn.send(("ok", result))
        except EngineFault as fault:
            conn.send(("fault", fault.context["fault_code"], fault.context["stage"],
                       fault.message))
        except Exception as exc:
            conn.send(("fault", FaultCode.ADAPTER_REQUEST_FAILED.value, stage,
                       f"{type(exc).__name__}: {exc}"))


def _child_main(conn: Connection, config: dict[str, Any]) -> None:
    """Boots one lane in this child process and serves the parent's commands.

    SIGINT ends the child at once and without a word (its default action): a Ctrl-C
    reaches the validator too, which reports ``interrupted`` and shuts its lanes down, so a
    lane's own KeyboardInterrupt traceback would only bury that line.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        from engine_bridge.hooks import resolve_callable

        lane = resolve_callable(config["factory"])(config)
    except BaseException as exc:
        cause = exc.__cause__ or exc
        conn.send(("boot_failed", "", config["stage"], f"{type(cause).__name__}: {cause}"))
        return
    conn.send(("ready", lane.boot_id))
    _serve(conn, lane, config["stage"])
    conn.close()
    # Skip interpreter teardown (about a second with torch loaded); nothing is buffered.
    os._exit(0)
