"""Runs one attempt through the SGLang adapter on a GPU host and writes what it recorded.

Called by ``tools/gpu_check.sh`` (which reports the host and installs what travels first).
It writes the tiny seeded reference Llama to a temporary folder, commissions an arena with
runtime ``sglang`` on a fresh SQLite ledger, takes the ``fast_mlp`` delta through intake,
evaluates it once (speed windows, eager audit, quality), then runs the CLI's ``explain``
and ``replay`` on that ledger. ``--engine torch-reference`` runs the same steps on the CPU
reference engine: a dry run of everything but the adapter, for hosts without a GPU.

Exit codes: 0 the attempt concluded and the ledger replays; 1 it ran but something failed
(a traceback is in the log); 2 the attempt ended in an infrastructure fault (recorded, and
named in summary.txt); 3 sglang cannot be imported; 4 no CUDA GPU is visible.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EXIT_FAILED = 1
EXIT_FAULT = 2
EXIT_NO_SGLANG = 3
EXIT_NO_GPU = 4

ARENA_ID = "gpu-check"
BLOCK = 1_000
#: The audit bar each dtype can meet (docs/engine.md): bfloat16 rounds every matmul.
AUDIT_BARS = {"float32": "0.99999", "bfloat16": "0.984"}


def sglang_engine_config(dtype: str) -> dict[str, Any]:
    """Returns the commission's ServerArgs for the tiny model: every lane on GPU 0.

    Three engines (two speed lanes, then the audit or quality lanes) share one GPU, so each
    takes a small static share; triton attention needs no flashinfer JIT on the host.
    """
    return {"dtype": dtype, "mem_fraction_static": "0.15", "attention_backend": "triton",
            "context_length": 256, "cuda_graph_max_bs": 8, "random_seed": 0, "tp_size": 1}


def commission(runtime: str, dtype: str) -> dict[str, Any]:
    """Returns the check arena's commission (paired-windows.v2, noise sealed by hand)."""
    from engine_bridge.deltas import registered
    from vocabulary.codec import digest

    bar = AUDIT_BARS[dtype] if runtime == "sglang" else "0.99999"
    config = (sglang_engine_config(dtype) if runtime == "sglang"
              else {"cost_clock": "perf_counter"})
    return {
        "arena_id": ARENA_ID,
        "commissioned_block": BLOCK,
        "model": {"name": "arena-ledger/reference-llama-1m", "revision": "seed-20250101"},
        "hardware": {"gpu": "cuda:0" if runtime == "sglang" else "cpu", "count": 1},
        "engine": {
            "runtime": runtime,
            "runtime_version": _runtime_version(runtime),
            "image_digest": "sha256:" + digest("arena-ledger.gpu-check", {"runtime": runtime}),
            "engine_config": config,
            "engine_env": {},
        },
        "policy": {
            "policy_version": "paired-windows.v2",
            "windows": 4,
            "z": {"3": "2", "4": "1.5"},
            # No calibration here: a wide hand-sealed noise, so one attempt decides honestly.
            "window_noise": "0.1",
            "boot_noise": "0.1",
            "noise_guard_alpha": "0.001",
            "required_gain": "0",
            "futility_margin": "0.05",
            "audit": {"bar": bar, "near_miss_band": "0.03",
                      "near_miss_rate_max": "0.01", "min_calls": 8},
            "reward_margin": "0.015",
            "audit_control_delta_digests": [registered("wrong_mlp").digest],
            "sla_blocks": 500_000,
        },
        "fee_rao": 100_000_000,
        "incumbent_digest": digest("arena-ledger.delta", {"stock": "reference-mlp"}),
        "emission_share_ppm": 600_000,
    }


def _runtime_version(runtime: str) -> str:
    if runtime == "sglang":
        import sglang

        return f"sglang-{getattr(sglang, '__version__', 'unknown')}"
    import torch

    return f"torch-{torch.__version__}"


def make_engine(runtime: str, model_dir: Path, dtype: str, receipts: Path) -> Any:
    """Boots the adapter under test: SGLang lanes on GPU 0, or the CPU reference lanes."""
    if runtime == "sglang":
        from engine_bridge.sglang_adapter import SGLangEngine

        return SGLangEngine(str(model_dir), sglang_engine_config(dtype), {},
                            receipts_root=str(receipts),
                            lane_gpus={"A": 0, "B": 0, "audit": 0},
                            boot_timeout_s=300.0, window_timeout_s=120.0)
    from services.evaluation import make_engine as reference_engine

    return reference_engine("torch-reference", model_dir=model_dir, in_process=True)


def _cli(args: list[str], db_url: str) -> dict[str, Any]:
    """Runs one ``arena-ledger`` command with ``--json`` on the check's ledger."""
    env = {**os.environ, "ARENA_LEDGER_DB": db_url}
    done = subprocess.run([sys.executable, "-m", "cli.app", *args, "--json"], env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"arena-ledger {' '.join(args)} exited {done.returncode}: "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def run_check(out: Path, runtime: str, dtype: str) -> int:
    """Runs the attempt and writes ledger, explain, replay and summary into ``out``."""
    from engine_bridge.deltas import registered
    from engine_bridge.reference_model import ensure_reference_model
    from ledger import migrate
    from services.arena_ledger import ArenaLedger
    from services.evaluation import evaluate
    from vocabulary.codec import digest

    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    db = work / "ledger.db"
    url = f"sqlite:///{db}"
    started = time.perf_counter()
    model_dir = ensure_reference_model(work / "model")
    migrate.upgrade(url)
    engine = make_engine(runtime, model_dir, dtype, work / "receipts")
    stages: list[dict[str, Any]] = []

    def progress(stage: str, info: dict[str, Any]) -> None:
        stages.append({"stage": stage, "t_s": round(time.perf_counter() - started, 3),
                       "info": info})
        print(f"[{time.perf_counter() - started:7.1f}s] {stage}: "
              f"{json.dumps(info, default=str)[:200]}", flush=True)

    try:
        with ArenaLedger(url, actor="gpu-check") as ledger:
            ledger.commission(commission(runtime, dtype))
            spec = registered("fast_mlp")
            outcome = ledger.intake({
                "arena_id": ARENA_ID, "miner_hotkey": "5GpuCheck",
                "content_hash": digest("arena-ledger.gpu-check", {"delta": "fast_mlp"}),
                "delta_digest": spec.digest,
                "target": "model.layers.*.mlp",
                "arrival": {"block": BLOCK + 1, "event_index": 0, "event_subindex": 0},
                "payment_ref": "pay-gpu-check-1"}, payment_amount_rao=100_000_000)
            if not outcome.admitted:
                raise RuntimeError(f"intake refused the check's submission: {outcome.to_json()}")
            sid = outcome.submission_id
            result = evaluate(ledger, engine, submission_id=sid, attempt_id="gpu-check-1",
                              block=BLOCK + 2, candidate=spec, progress=progress)
        if result.audit_nodes == 0 and result.fault is None:
            # Speed did not pass, so the ledger holds no audit; the adapter's eager audit and
            # quality lanes still run, reported beside the ledger (never appended to it).
            _direct_audit(engine, spec, runtime, dtype, progress)
    finally:
        engine.shutdown()
    attempt_s = time.perf_counter() - started
    explained = _cli(["explain", "submission", sid], url)
    replayed = _cli(["replay"], url)
    shutil.copyfile(db, out / "ledger.db")
    _write_json(out / "explain.json", explained)
    _write_json(out / "replay.json", replayed)
    _write_json(out / "stages.json", stages)
    summary = _summary(runtime, dtype, result.to_json(), explained, replayed, attempt_s,
                       stages)
    (out / "summary.txt").write_text(summary)
    print(summary, end="")
    shutil.rmtree(work, ignore_errors=True)
    if not replayed.get("ok") or not result.decision.get("verdict"):
        return EXIT_FAILED
    return EXIT_FAULT if result.fault is not None else 0


def _direct_audit(engine: Any, spec: Any, runtime: str, dtype: str, progress: Any) -> None:
    """Runs the audit and quality stages on the engine without the ledger."""
    from engine_bridge.hooks import run_audit
    from engine_bridge.prompt_slice import load_replay_slice
    from engine_bridge.quality import grade_quality

    replay = load_replay_slice()
    bar = AUDIT_BARS[dtype] if runtime == "sglang" else "0.99999"
    nodes = run_audit(engine, spec, replay, bar=bar, near_miss_band="0.03")
    progress("direct_audit", {"nodes": nodes})
    progress("direct_quality", grade_quality(engine, spec, replay).payload)


def _write_json(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


def _summary(runtime: str, dtype: str, result: dict[str, Any], explained: dict[str, Any],
             replayed: dict[str, Any], attempt_s: float, stages: list[dict[str, Any]]) -> str:
    """Returns the short text a person reads: verdict, windows, audit, quality, replay."""
    attempt = (explained.get("attempts") or [{}])[-1]
    typed = f"runtime {runtime}" + (f", dtype {dtype}" if runtime == "sglang" else "")
    lines = [f"{typed}, one attempt of fast_mlp in {attempt_s:.1f} s",
             f"verdict {result.get('verdict')} reason {result.get('reason')} "
             f"speedup {result.get('speedup')} fault {result.get('fault')}",
             f"windows recorded {result.get('windows')}"]
    for window in attempt.get("windows") or []:
        lines.append("  window " + json.dumps(window, sort_keys=True, default=str)[:300])
    lines.append(f"audit nodes {result.get('audit_nodes')}")
    audit = attempt.get("audit")
    if audit is not None:
        lines.append("  audit " + json.dumps(audit, sort_keys=True, default=str)[:600])
    lines.append(f"quality graded {result.get('quality')}: "
                 + json.dumps(attempt.get("quality"), sort_keys=True, default=str)[:300])
    for stage in stages:
        if stage["stage"].startswith("direct_"):
            lines.append(f"{stage['stage']} (outside the ledger) "
                         + json.dumps(stage["info"], sort_keys=True, default=str)[:900])
    lines.append(f"replay ok {replayed.get('ok')} events {replayed.get('events')} "
                 f"verdicts checked {replayed.get('verdicts_checked')}")
    return "\n".join(lines) + "\n"


def preflight(runtime: str) -> str | None:
    """Returns why the check cannot run here (one line), or None: sglang, then the GPU."""
    if runtime != "sglang":
        return None
    try:
        import sglang  # noqa: F401
    except Exception as exc:  # any import failure: a missing wheel or a broken native one
        return (f"gpu-check: sglang cannot be imported ({type(exc).__name__}: {exc}); carry "
                "its wheels and their dependencies under .whl/ (docs/engine.md, GPU check)")
    import torch

    if not torch.cuda.is_available():
        return "gpu-check: torch sees no CUDA GPU; run this on a GPU host"
    return None


def main(argv: list[str] | None = None) -> int:
    """Parses the options, checks the host, runs the attempt; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or
                                                          "gpu-check-out"))
    parser.add_argument("--engine", choices=("sglang", "torch-reference"), default="sglang")
    parser.add_argument("--dtype", choices=sorted(AUDIT_BARS), default="bfloat16")
    args = parser.parse_args(argv)
    reason = preflight(args.engine)
    if reason is not None:
        print(reason, file=sys.stderr)
        return EXIT_NO_SGLANG if "sglang" in reason else EXIT_NO_GPU
    args.out.mkdir(parents=True, exist_ok=True)
    return run_check(args.out, args.engine, args.dtype)


if __name__ == "__main__":
    sys.exit(main())
