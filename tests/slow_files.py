"""Names the test files that take longest, slowest first, for the suite's file order.

The suite runs on two workers, one whole file at a time (``--dist loadfile``), and xdist
hands files out in collection order (``--no-loadscope-reorder``). Its default order (most
tests first) left one-test files such as the compiled build last, where one worker ran
them alone while the other sat idle; handing out the longest files first and the many
short ones after lets both workers finish together. ``tests/conftest.py`` sorts by this
list; a file not listed keeps its place after the listed ones. Re-measure with
``pytest --durations=0`` and update the order when a file's time changes much.
"""

from __future__ import annotations

SLOW_FIRST: tuple[str, ...] = (
    "tests/integration/test_compiled_build.py",
    "tests/e2e/test_demo.py",
    "tests/e2e/test_cli_output.py",
    "tests/e2e/test_cli_refusals.py",
    "tests/e2e/test_cli_verifiable.py",
    "tests/integration/test_store_contract.py",
    "tests/e2e/test_cli_core.py",
    "tests/integration/test_verifiable_bundles.py",
    "tests/e2e/test_cli_arena.py",
    "tests/integration/test_read_models.py",
    "tests/integration/test_runner.py",
    "tests/e2e/test_cli_calibrate.py",
    "tests/integration/test_domain_processes.py",
    "tests/integration/test_seeded_fold.py",
    "tests/integration/test_store_tamper.py",
    "tests/e2e/test_cli_evaluate.py",
    "tests/integration/test_replay.py",
    "tests/reliability/test_hostile_input.py",
    "tests/integration/test_migrations.py",
    "tests/integration/test_verifiable_proofs.py",
    "tests/web/test_web_arenas.py",
    "tests/integration/test_replay_sources.py",
    "tests/integration/test_domain_concurrency.py",
    "tests/e2e/test_cli_settlement.py",
    "tests/integration/test_ops.py",
    "tests/integration/test_domain_enforcement.py",
    "tests/e2e/test_cli_follow.py",
)
