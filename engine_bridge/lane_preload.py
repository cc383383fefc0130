"""Is the first module the lanes' fork server imports: a Ctrl-C then ends a lane quietly.

Importing it restores the default action of SIGINT in the importing process, which is all
it does; only the fork server imports it (``SubprocessEngine`` names it as a preload). The
fork server imports its preload modules (torch: seconds) before it starts ignoring SIGINT,
and every lane forked from it gets back the handler the server had then. With Python's
handler, a Ctrl-C at the terminal, which reaches the whole process group, raised
KeyboardInterrupt in each lane and in a server still importing torch, and each printed its
traceback under the validator's one-line ``interrupted``. The default action ends them
without a word; the validator, interrupted too, shuts its engine down.
"""

from __future__ import annotations

import signal

__all__: list[str] = []

signal.signal(signal.SIGINT, signal.SIG_DFL)
