"""Tests lanes in child processes: real kills, boot failures, timeouts, isolation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from engine_bridge.deltas import load_file_delta, registered
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.reference_model import write_reference_model
from engine_bridge.speed import run_windows
from engine_bridge.subprocess_lane import SubprocessEngine
from vocabulary.errors import EngineFault

pytest.importorskip("torch")

REPLAY = load_replay_slice()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reference_model(tmp_path_factory.mktemp("reference"))


@pytest.fixture
def engine(model_dir: Path) -> Any:
    engine = SubprocessEngine(model_dir)
    yield engine
    engine.shutdown()


def test_engine_killed_mid_window_keeps_earlier_windows(engine: SubprocessEngine) -> None:
    seen: list[dict[str, Any]] = []
    with pytest.raises(EngineFault) as caught:
        run_windows(engine, registered("engine_kill", window="2"), REPLAY, windows=4,
                    on_window=lambda p: seen.append(p) or True, warmup_runs=0)
    assert [p["window"] for p in seen] == [1]
    assert caught.value.context["fault_code"] == "engine_killed"
    assert caught.value.context["stage"] == "speed"
    assert caught.value.context["exitcode"] == -9  # SIGKILL, not a clean exit
    assert engine.lanes == []


def test_external_kill_between_windows_is_engine_killed(engine: SubprocessEngine) -> None:
    def kill_candidate_after_first(payload: dict[str, Any]) -> bool:
        candidate = next(lane for lane in engine.lanes if lane.lane_id == "A")
        candidate.kill()
        return True

    with pytest.raises(EngineFault) as caught:
        run_windows(engine, registered("faithful"), REPLAY, windows=4,
                    on_window=kill_candidate_after_first, warmup_runs=0)
    assert caught.value.context["fault_code"] == "engine_killed"


def test_boot_failure_is_adapter_start_failed(engine: SubprocessEngine, tmp_path: Path) -> None:
    source = tmp_path / "broken.py"
    source.write_text("raise ImportError('missing kernel')\ndef build_mlp(stock):\n"
                      "    return stock\n")
    lane = engine.boot_lane("A", load_file_delta(source))
    with pytest.raises(EngineFault) as caught:
        lane.ready()
    assert caught.value.context["fault_code"] == "adapter_start_failed"
    assert "missing kernel" in caught.value.message


def test_window_timeout_is_adapter_timeout(model_dir: Path) -> None:
    engine = SubprocessEngine(model_dir, window_timeout_s=0.01)
    lane = engine.boot_lane("A", registered("slow", repeats="8"))
    try:
        with pytest.raises(EngineFault) as caught:
            lane.run_window(REPLAY, window=1)
        assert caught.value.context["fault_code"] == "adapter_timeout"
    finally:
        engine.shutdown()


def test_child_output_matches_in_process_and_file_delta_runs_in_child(
        engine: SubprocessEngine, model_dir: Path, tmp_path: Path) -> None:
    from engine_bridge.torch_engine import TorchReferenceEngine

    marker = tmp_path / "pid.txt"
    source = tmp_path / "delta.py"
    source.write_text(f"import os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
                      "def build_mlp(stock):\n    return stock\n")
    child = engine.boot_lane("A", load_file_delta(source))
    child.ready()
    remote = child.run_window(REPLAY)
    local = TorchReferenceEngine(model_dir).boot_lane("A").run_window(REPLAY)
    assert remote.output_token_ids == local.output_token_ids
    assert int(marker.read_text()) not in (os.getpid(), None)


def test_thread_time_clock_is_selectable_by_name(model_dir: Path) -> None:
    engine = SubprocessEngine(model_dir, clock="thread_time")
    try:
        lane = engine.boot_lane("A")
        lane.ready()
        run = lane.run_window(REPLAY)
        assert run.cost_ns > 0 and run.output_tokens == 128
    finally:
        engine.shutdown()


#: A validator that boots two lanes, then runs a long window on one: the test presses
#: Ctrl-C (SIGINT to the process group) once both lanes serve. Its own KeyboardInterrupt
#: becomes exit 130, as the CLI's ``interrupted`` does.
_INTERRUPTED_VALIDATOR = """
import sys
from engine_bridge.deltas import registered
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.subprocess_lane import SubprocessEngine

engine = SubprocessEngine(sys.argv[1])
try:
    lanes = [engine.boot_lane(lane, registered("slow", repeats="64")) for lane in "AB"]
    for lane in lanes:
        lane.ready()
    print("serving", flush=True)
    lanes[0].run_window(load_replay_slice(), window=1)
    print("the window ended before the interrupt", flush=True)
except KeyboardInterrupt:
    engine.shutdown()
    sys.exit(130)
"""


def test_ctrl_c_ends_the_lanes_without_a_traceback(model_dir: Path) -> None:
    import signal
    import subprocess
    import sys

    validator = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_VALIDATOR, str(model_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # its own process group, as a terminal's foreground job
    try:
        assert validator.stdout is not None
        assert validator.stdout.readline() == "serving\n"
        os.killpg(validator.pid, signal.SIGINT)
        out, err = validator.communicate(timeout=60)
    finally:
        if validator.poll() is None:
            validator.kill()
    # Each lane (the busy one and the idle one) printed a KeyboardInterrupt traceback.
    assert (validator.returncode, out) == (130, ""), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_the_fork_servers_preload_restores_sigints_default_action() -> None:
    import subprocess
    import sys

    # The fork server imports it before torch, so a Ctrl-C during that import is quiet too,
    # and the lanes it forks inherit the default action.
    probe = ("import signal; assert signal.getsignal(signal.SIGINT) is signal.default_int_handler;"
             " import engine_bridge.lane_preload; "
             "assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr


def test_speed_lanes_are_alike_unless_pinned(model_dir: Path) -> None:
    # By default neither speed lane is pinned: both may run on every core the validator
    # may use, so a busy core slows whichever arm runs, never one lane only. An explicit
    # mapping still pins.
    cores = sorted(os.sched_getaffinity(0))
    engines = [SubprocessEngine(model_dir), SubprocessEngine(model_dir,
                                                             cpu_affinity={"A": cores[-1]})]
    try:
        lanes = [engine.boot_lane(lane_id) for engine in engines for lane_id in ("A", "B")]
        for lane in lanes:
            lane.ready()
        affinity = [os.sched_getaffinity(lane.pid or 0) for lane in lanes]
    finally:
        for engine in engines:
            engine.shutdown()
    assert affinity == [set(cores), set(cores), {cores[-1]}, set(cores)]
