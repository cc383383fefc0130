"""Builds arena-ledger; ``ARENA_LEDGER_COMPILE=1`` also compiles replay's hot path with mypyc.

The package is pure Python and ``pip install`` builds it so. A validator that replays long
ledgers can compile the modules replay spends most of its time in with mypyc (part of
mypy, already a dev dependency): the same source, type-checked under ``mypy --strict``,
turned into C extensions. On the 1M-event benchmark ledger that replayed 0-15% faster,
depending on the host (four measured: docs/benchmarks.md, "Replay builds"). Built in
place, next to the sources:

    ARENA_LEDGER_COMPILE=1 .venv/bin/python setup.py build_ext --inplace --force

An extension module shadows its ``.py``: after editing a compiled module, build again or
remove ``ledger/*.so`` and ``machines/*.so`` (``tests/conftest.py`` refuses to run on a
stale one).
"""

import os

from setuptools import setup

#: The modules compiled when asked: the replay loop and hash chain, the ledger fold, intake
#: and the settlement tracker. machines/attempt.py and submission.py stay interpreted
#: (their states are copied through ``__dict__``, which compiled classes do not have),
#: and so does machines/arithmetic.py (its decimal contexts are not the dicts it declares).
COMPILED = [
    "ledger/chain.py",
    "ledger/replay.py",
    "ledger/settle.py",
    "machines/intake.py",
    "machines/projection.py",
]

ext_modules = []
if os.environ.get("ARENA_LEDGER_COMPILE") == "1":
    from mypyc.build import mypycify

    # The shared library lives in the ledger package (ledger/replay_compiled__mypyc.*.so),
    # where an editable install finds it, not at the top of the tree.
    ext_modules = mypycify(COMPILED, opt_level="3", group_name="ledger.replay_compiled")

setup(ext_modules=ext_modules)
