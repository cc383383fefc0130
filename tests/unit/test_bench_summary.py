"""bench/run.py's Summary: a run of some benchmarks keeps what only the others measure.

The Summary of docs/benchmarks.md holds, besides the targets, the store's peers table and
the Scale series' query latencies. A run without those benchmarks (``--only replay``) must
carry them over from the run that measured them, named with it, as it carries the target
rows, rather than write a Summary without them.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
EARLIER = "2026-11-30 15:17 UTC"
NOW = "2026-11-30 17:16 UTC"
OTHER_HOST = "Intel(R) Xeon(R) Processor, 6.18.44-fc-v769"
PEERS = ["Ours beside each peer in the same run (bench/store.py):", "", "| a | b |\n|---|---|", ""]
QUERIES = ["No issue sets a target for the queries a user types. …", ""]


@pytest.fixture(scope="module")
def run() -> Any:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    return importlib.import_module("bench.run")


def _replay_only(run: Any) -> dict[str, Any]:
    return {"replay": run.BenchRun("replay", {"events": 1_000_000})}


def test_a_replay_only_run_keeps_the_peers_and_queries_of_an_earlier_run_named_with_it(
    run: Any,
) -> None:
    kept = [run.SummaryBlock("peers", PEERS, EARLIER, OTHER_HOST),
            run.SummaryBlock("queries", QUERIES, EARLIER, OTHER_HOST)]
    runs = _replay_only(run)
    machine = {"CPU": "AMD EPYC"}
    blocks = run.merge_blocks(run.summary_blocks(runs, NOW, run.host_name(machine)), kept)
    text = run.summary_section([], runs, NOW, ["python bench/run.py --only replay"], machine,
                               blocks)
    lines = text.split("\n")
    named = f"(From the run of {EARLIER} on {OTHER_HOST}.)"
    # Queries first, then the peers table, each followed by the run it came from.
    at_queries, at_peers = lines.index(QUERIES[0]), lines.index(PEERS[0])
    assert at_queries < at_peers
    assert lines[at_queries + 2] == named
    assert lines[at_peers : at_peers + 5] == [PEERS[0], "", "| a | b |", "|---|---|", ""]
    assert lines[at_peers + 5] == named
    assert lines.index("What ran:") > at_peers
    assert f'The run of `bench/run.py` of {NOW} ran only the benchmarks under "What ran"' in text


def test_a_run_of_every_benchmark_says_so(run: Any) -> None:
    runs = {name: run.BenchRun(name, {}) for name in run.BENCHES}
    text = run.summary_section([], runs, NOW, ["python bench/run.py"], {"CPU": "AMD EPYC"})
    assert f"The run of `bench/run.py` of {NOW} ran every benchmark in turn" in text
    assert "From the run of" not in text  # nothing carried over


def test_a_block_from_this_run_names_no_earlier_run_and_replaces_the_kept_one(run: Any) -> None:
    host = "AMD EPYC, v857"
    fresh = [run.SummaryBlock("peers", ["fresh peers", ""], NOW, host)]
    kept = [run.SummaryBlock("peers", PEERS, EARLIER, OTHER_HOST),
            run.SummaryBlock("queries", QUERIES, EARLIER, host)]
    merged = run.merge_blocks(fresh, kept)
    assert [(b.key, b.when) for b in merged] == [("queries", EARLIER), ("peers", NOW)]
    assert run.blocks_lines(merged, NOW, host) == [
        *QUERIES, f"(From the run of {EARLIER}.)", "",  # same machine: not named again
        "fresh peers", "",
    ]


def test_an_earlier_block_without_its_machine_says_so(run: Any) -> None:
    block = run.SummaryBlock("queries", QUERIES, EARLIER)
    assert run.blocks_lines([block], NOW, "AMD EPYC, v857")[-2] == (
        f"(From the run of {EARLIER}, machine not recorded.)"
    )


def test_blocks_are_saved_with_the_targets_and_read_back(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    row = run.TargetRow("fold_rate", "LedgerFold ≥ 100,000 events/s", "102,016 ev/s", "",
                        "bench/fold.py", "1.0", True, 1_000_000, EARLIER, 0, OTHER_HOST)
    blocks = [run.SummaryBlock("peers", PEERS, EARLIER, OTHER_HOST)]
    run.save_targets([row], path, blocks)
    assert run.load_previous(path, tmp_path / "absent.json") == [row]
    assert run.load_blocks(path, tmp_path / "absent.json") == blocks


def test_a_file_written_before_blocks_were_kept_falls_through_to_the_documented_ones(
    run: Any, tmp_path: Path
) -> None:
    local, documented = tmp_path / "summary.json", tmp_path / "targets.json"
    local.write_text(json.dumps({"targets": []}))  # an older run's file: no blocks
    blocks = [run.SummaryBlock("queries", QUERIES, EARLIER, OTHER_HOST)]
    run.save_targets([], documented, blocks)
    assert run.load_blocks(local, documented) == blocks
    local.write_text("not json")
    assert run.load_blocks(local, documented) == blocks
    assert run.load_blocks(tmp_path / "none.json", tmp_path / "neither.json") == []


def test_the_committed_targets_file_keeps_the_summary_blocks(run: Any) -> None:
    documented = run.TARGETS_JSON
    blocks = run.load_blocks(documented, documented)
    assert {b.key for b in blocks} == {"peers", "queries"}
    doc = (_ROOT / "docs" / "benchmarks.md").read_text()
    for block in blocks:  # what the docs' Summary shows, not a stale copy
        assert "\n".join(block.lines).strip() in doc
