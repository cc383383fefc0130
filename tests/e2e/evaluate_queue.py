"""Queues a submission behind a torch-reference commission through the CLI, the starting
point of the evaluate and engine-input suites.
"""

from __future__ import annotations

from typing import Any

from engine_bridge.deltas import registered

ARENA = "cli-eval"
FEE = 5_000
WRONG = registered("wrong_mlp")
KILL = registered("engine_kill")


def commission() -> dict[str, Any]:
    """Returns a torch-reference commission: 4 windows, futility, float32 audit bar."""
    return {
        "arena_id": ARENA, "commissioned_block": 1_000,
        "model": {"name": "arena-ledger/reference-llama-1m", "revision": "seed-20250101"},
        "hardware": {"gpu": "cpu", "count": 1},
        "engine": {"runtime": "torch-reference", "runtime_version": "torch-2.13.0",
                   "image_digest": "sha256:" + "0" * 64,
                   "engine_config": {"cost_clock": "thread_time"}, "engine_env": {}},
        "policy": {
            "policy_version": "paired-windows.v1", "windows": 4, "z": {"3": "2", "4": "1.5"},
            "window_noise": "0.01", "boot_noise": "0.005", "required_gain": "0",
            "futility_margin": "0.05",
            "audit": {"bar": "0.99999", "near_miss_band": "0.03",
                      "near_miss_rate_max": "0.01", "min_calls": 8},
            "reward_margin": "0.015", "audit_control_delta_digests": [], "sla_blocks": 500_000,
        },
        "fee_rao": FEE, "incumbent_digest": "1" * 64, "emission_share_ppm": 500_000,
    }


def queued(cli: Any) -> dict[str, Any]:
    """Initialises ``cli``'s ledger with the arena, an engine-kill control and one QUEUED
    submission; returns what intake printed (JSON)."""
    cli("init")
    cli("commission", cli.write("commission.json", commission()))
    cli("register-control", ARENA, "--id", "kill", "--kind", "engine_kill",
        "--delta-digest", KILL.digest, "--expect", "NO_DECISION",
        "--expect-reason", "engine_killed")
    arrival = {"arena_id": ARENA, "miner_hotkey": "5Miner", "content_hash": "c" * 64,
               "delta_digest": WRONG.digest, "target": "model.layers.*.mlp",
               "payment_ref": "pay-1",
               "arrival": {"block": 1_050, "event_index": 0, "event_subindex": 0}}
    intake: dict[str, Any] = cli.json("intake", cli.write("arrival.json", arrival),
                                      "--paid-rao", str(FEE))
    return intake
