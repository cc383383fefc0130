"""Holds every bound of the engine bridge as a named constant, unit last."""

from __future__ import annotations

__all__ = [
    "audit_min_score_places",
    "boot_timeout_s",
    "detail_chars_max",
    "quality_ratio_places",
    "rate_places",
    "replay_max_new_tokens_max",
    "replay_prompt_tokens_max",
    "replay_requests_max",
    "shutdown_timeout_s",
    "slow_delta_repeats_max",
    "window_runs",
    "window_timeout_s",
    "windows_max",
    "windows_min",
]

#: Windows per attempt allowed by policy ``paired-windows.v1`` (docs/events.md).
windows_min = 2
windows_max = 5

#: Runs of the whole slice each arm makes per speed window, interleaved ABBA (speed.py).
window_runs = 2

#: How long a lane may take to boot before the attempt records ``adapter_timeout``.
boot_timeout_s = 120.0
#: How long one window (or one audit or quality pass) may run on one lane.
window_timeout_s = 120.0
#: How long a lane gets to exit cleanly before it is killed.
shutdown_timeout_s = 10.0

#: Longest ``detail`` string an InfrastructureFault payload carries.
detail_chars_max = 500

#: Decimal places kept in ``min_score`` (rounded toward zero, then canonicalised).
audit_min_score_places = 6
#: Decimal places kept in ``argmax_agreement`` (rounded toward zero, then canonicalised).
quality_ratio_places = 6
#: Decimal places kept in the optional ``*_decode_tps`` and ``*_ttft_ms`` window fields.
rate_places = 3

#: Bounds on a replay slice, checked when the slice is loaded.
replay_requests_max = 256
replay_prompt_tokens_max = 1024
replay_max_new_tokens_max = 256

#: Most repeats the deliberately slow control delta may be asked for.
slow_delta_repeats_max = 64
