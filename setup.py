"""Builds arena-ledger; ``ARENA_LEDGER_COMPILE=1`` also compiles replay's hot path with mypyc.

The package is pure Python and ``pip install`` builds it so. A validator that replays long
ledgers can compile the modules replay spends most of its time in with mypyc (part of
mypy, already a dev dependency): the same source, type-checked under ``mypy --strict``,
turned into C extensions, which replay faster on some hosts and not on others
(docs/benchmarks.md, "Replay builds", has the figures). Built in place, next to the
sources:

    ARENA_LEDGER_COMPILE=1 .venv/bin/python setup.py build_ext --inplace --force

``ARENA_LEDGER_COMPILE_OPT`` sets the C compiler's optimisation level (0-3, default 3, the
build that was measured); the suite's check of this build (tests/integration/compiled_check.py)
uses 0: the same mypyc translation, checked by the same tests, in a third less time.

An extension module shadows its ``.py``: after editing a compiled module, build again or
remove the ``*.so`` files beside them (``tests/conftest.py`` refuses to run on a
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
    "services/replay.py",
    "services/settlements.py",
    "machines/intake.py",
    "machines/projection.py",
]

ext_modules = []
if os.environ.get("ARENA_LEDGER_COMPILE") == "1":
    from mypyc.build import mypycify

    # The shared library lives in the services package (services/replay_compiled__mypyc.*.so),
    # where an editable install finds it, not at the top of the tree.
    opt_level = os.environ.get("ARENA_LEDGER_COMPILE_OPT", "3")
    if opt_level not in ("0", "1", "2", "3"):
        raise SystemExit(f"ARENA_LEDGER_COMPILE_OPT is 0, 1, 2 or 3, not {opt_level!r}")
    ext_modules = mypycify(COMPILED, opt_level=opt_level, group_name="services.replay_compiled")

setup(ext_modules=ext_modules)
