"""Holds every bound the use cases check where input enters, unit last."""

from __future__ import annotations

__all__ = [
    "head_block_page_positions",
    "line_bytes_max",
    "submission_prefix_min",
    "tool_message_chars_max",
]

#: Longest accepted input line, in bytes (a payload's limit plus room for the envelope).
line_bytes_max = 131_072

#: Fewest characters of a submission id that ``explain_submission`` takes as a prefix.
submission_prefix_min = 8

#: Longest stderr excerpt of pg_dump / pg_restore quoted in an error, in characters.
tool_message_chars_max = 400

#: Positions read at a time, backwards from the head, looking for the head's block
#: (``services.weights_preview.head_block``).
head_block_page_positions = 1_000
