"""Holds every bound of the engine bridge as a named constant, unit last."""

from __future__ import annotations

__all__ = [
    "AUDIT_MIN_SCORE_PLACES",
    "BOOT_TIMEOUT_S",
    "DETAIL_CHARS_MAX",
    "QUALITY_RATIO_PLACES",
    "RATE_PLACES",
    "REPLAY_MAX_NEW_TOKENS_MAX",
    "REPLAY_PROMPT_TOKENS_MAX",
    "REPLAY_REQUESTS_MAX",
    "SHUTDOWN_TIMEOUT_S",
    "SLOW_DELTA_REPEATS_MAX",
    "WINDOWS_MAX",
    "WINDOWS_MIN",
    "WINDOW_TIMEOUT_S",
]

#: Windows per attempt allowed by policy ``paired-windows.v1`` (DOMAIN §6).
WINDOWS_MIN = 2
WINDOWS_MAX = 5

#: How long a lane may take to boot before the attempt records ``adapter_timeout``.
BOOT_TIMEOUT_S = 120.0
#: How long one window (or one audit or quality pass) may run on one lane.
WINDOW_TIMEOUT_S = 120.0
#: How long a lane gets to exit cleanly before it is killed.
SHUTDOWN_TIMEOUT_S = 10.0

#: Longest ``detail`` string an InfrastructureFault payload carries.
DETAIL_CHARS_MAX = 500

#: Decimal places kept in ``min_score`` (rounded toward zero, then canonicalised).
AUDIT_MIN_SCORE_PLACES = 6
#: Decimal places kept in ``argmax_agreement`` (rounded toward zero, then canonicalised).
QUALITY_RATIO_PLACES = 6
#: Decimal places kept in the optional ``*_decode_tps`` and ``*_ttft_ms`` window fields.
RATE_PLACES = 3

#: Bounds on a replay slice, checked when the slice is loaded.
REPLAY_REQUESTS_MAX = 256
REPLAY_PROMPT_TOKENS_MAX = 1024
REPLAY_MAX_NEW_TOKENS_MAX = 256

#: Most repeats the deliberately slow control delta may be asked for.
SLOW_DELTA_REPEATS_MAX = 64
