"""Tests the eager audit on the reference engine and the shared hook on SGLang-named models."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from engine_bridge.deltas import load_file_delta, registered
from engine_bridge.hooks import (
    AuditSession,
    AuditSpec,
    audit_hook_specs,
    close_session,
    delta_install_specs,
    read_install_receipts,
    read_receipts,
    register_forward_hooks,
    run_audit,
    score_outputs,
    tallies_to_payloads,
)
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.reference_model import write_reference_model
from vocabulary.errors import EngineFault

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from engine_bridge.torch_engine import TorchReferenceEngine  # noqa: E402

REPLAY = load_replay_slice()
CALLS_PER_NODE = 2 * (1 + 15)  # two batches, one prefill and 15 decode steps each
NODES = [f"model.layers.{i}.mlp" for i in range(4)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TorchReferenceEngine:
    folder = write_reference_model(tmp_path_factory.mktemp("reference"))
    return TorchReferenceEngine(folder, trust_file_deltas=True)


def _audit(engine: TorchReferenceEngine, spec: Any) -> list[dict[str, Any]]:
    return run_audit(engine, spec, REPLAY, bar="0.99999", near_miss_band="0.03")


@pytest.mark.parametrize("name", ["faithful", "fast_mlp", "fused_gate_up", "slow"])
def test_stock_equivalent_deltas_have_no_violation(engine: TorchReferenceEngine,
                                                   name: str) -> None:
    payloads = _audit(engine, registered(name, **({"repeats": "2"} if name == "slow" else {})))
    assert [p["node"] for p in payloads] == NODES
    for p in payloads:
        assert (p["calls"], p["violations"], p["near_misses"], p["uncomparable"]) == (
            CALLS_PER_NODE, 0, 0, 0)
        assert p["rank"] == 0 and p["bar"] == "0.99999"
        if name in ("faithful", "slow"):  # stock's own sub-modules: bit-identical
            assert p["min_score"] == "1"
        else:  # other GEMMs (pre-transposed weights) sum in another order: rounding only
            assert Decimal("0.99999") <= Decimal(p["min_score"]) < 1


@pytest.mark.parametrize("name", ["wrong_mlp", "skip_mlp"])
def test_wrong_deltas_violate_on_every_call(engine: TorchReferenceEngine, name: str) -> None:
    payloads = _audit(engine, registered(name))
    assert len(payloads) == 4
    for p in payloads:
        assert p["violations"] == p["calls"] == CALLS_PER_NODE
        assert p["uncomparable"] == 0
    if name == "skip_mlp":
        assert {p["min_score"] for p in payloads} == {"0"}


def test_scaled_float32_delta_is_a_near_miss_on_every_call(engine: TorchReferenceEngine) -> None:
    for p in _audit(engine, registered("scaled", epsilon="0.001")):
        assert p["near_misses"] == p["calls"] == CALLS_PER_NODE
        assert p["violations"] == 0
        assert p["min_score"].startswith("0.998")  # 1 - 0.001, less float32 rounding


@pytest.mark.parametrize(("bar", "band", "counted"), [
    ("0.99", "0.03", None),  # a bfloat16-style bar: about 0.999 is at or above it
    ("0.99999", "0.0001", "violations"),  # more than the band below the bar
])
def test_the_audit_classifies_against_the_bar_and_band_it_is_given(
    engine: TorchReferenceEngine, bar: str, band: str, counted: str | None
) -> None:
    # scaled(0.001) scores about 0.999 a call: a near miss under the defaults (above), but
    # the sealed bar and band of the arena decide, not the defaults.
    payloads = run_audit(engine, registered("scaled", epsilon="0.001"), REPLAY, bar=bar,
                         near_miss_band=band)
    assert len(payloads) == 4
    for p in payloads:
        assert p["bar"] == bar
        expected = {"violations": 0, "near_misses": 0}
        if counted is not None:
            expected[counted] = CALLS_PER_NODE
        assert {k: p[k] for k in expected} == expected, p


def test_score_is_accumulated_in_float64_not_in_the_outputs_dtype() -> None:
    # docs/engine.md: computed in float64. ||r||² of these float32 outputs overflows float32,
    # where ||r|| is inf and any candidate scores 1.0; in float64 the 0.1 % error shows.
    r = torch.full((4,), 1e20, dtype=torch.float32)
    score = score_outputs(r * 1.001, r)
    assert score is not None and abs(score - 0.999) < 1e-5


def test_an_audited_node_that_is_never_called_is_graded_with_zero_calls() -> None:
    # A node whose hook never fires (a CUDA graph replay, a branch not taken) is still
    # graded, with 0 calls, so the machine decides audit_not_covered (fewer than
    # min_calls) rather than audit fewer nodes without a word.
    anchor = nn.ModuleDict({"layers": nn.ModuleList(
        nn.ModuleDict({"mlp": nn.Identity(), "self_attn": nn.Identity()}) for _ in range(2))})
    session = AuditSession(AuditSpec(registered("faithful")).to_config())
    session.bind_names(anchor)
    payloads = tallies_to_payloads(session.snapshot(), "0.99999")
    assert [(p["node"], p["calls"]) for p in payloads] == [
        ("model.layers.0.mlp", 0), ("model.layers.1.mlp", 0)]


def _delta_file(folder: Path, name: str, forward: str) -> Path:
    """Writes a file delta whose MLP's forward(x, ...) is the one statement ``forward``."""
    path = folder / f"{name}.py"
    path.write_text("import torch\nclass Delta(torch.nn.Module):\n"
                    f"    def forward(self, x, *a, **k):\n        {forward}\n"
                    "def build_mlp(stock):\n    return Delta()\n")
    return path


def test_raising_and_nan_candidates_are_uncomparable(engine: TorchReferenceEngine,
                                                     tmp_path: Path) -> None:
    raising = _delta_file(tmp_path, "raising", "raise RuntimeError('no')")
    nan = _delta_file(tmp_path, "nan", "return x * float('nan')")
    for source in (raising, nan):
        for p in _audit(engine, load_file_delta(source)):
            assert p["uncomparable"] == p["calls"] == CALLS_PER_NODE
            assert p["violations"] == 0 and p["min_score"] == "0"


def test_no_matching_node_grades_nothing(engine: TorchReferenceEngine) -> None:
    assert run_audit(engine, registered("faithful"), REPLAY,
                     target_modules=["model.layers.*.moe"]) == []


def test_score_outputs_edge_cases() -> None:
    r = torch.ones(2, 3)
    assert score_outputs(r.clone(), r) == 1.0
    assert score_outputs(torch.ones(3, 2), r) is None
    assert score_outputs(r * 3, r) == 0.0  # floored at zero
    assert score_outputs(torch.zeros(2), torch.zeros(2)) == 1.0
    assert score_outputs(torch.ones(2), torch.zeros(2)) == 0.0
    assert score_outputs(r * float("inf"), r) is None


class SiluAndMul(nn.Module):
    """Mimics SGLang's fused activation: silu(first half) * second half."""

    def forward(self, x: Any) -> Any:
        gate, up = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up


class SglangStyleMLP(nn.Module):
    """Mimics SGLang's LlamaMLP layout: merged gate_up_proj, down_proj, extra forward args."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.act_fn = SiluAndMul()

    def forward(self, x: Any, forward_batch: Any = None) -> Any:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class ToyDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.ModuleDict({"mlp": SglangStyleMLP(8, 16)}) for _ in range(2))

    def forward(self, x: Any) -> Any:
        for layer in self.layers:
            x = x + layer["mlp"](x, None)
        return x


class ToyCausalLM(nn.Module):
    """Has SGLang's module names: ``model.layers.<i>.mlp`` under a root."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = ToyDecoder()

    def forward(self, x: Any) -> Any:
        return self.model(x)


def _toy_run(spec: AuditSpec) -> tuple[Any, Any]:
    toy = ToyCausalLM()
    x = torch.randn(3, 8)
    expected = toy.forward(x)
    handles = register_forward_hooks(toy, audit_hook_specs(spec))
    with torch.inference_mode():
        for _ in range(3):
            got = toy.forward(x)  # SGLang calls the root's forward directly, not __call__
    for handle in handles:
        handle.remove()
    close_session(spec.session)
    return expected, got


@pytest.mark.parametrize(("name", "violating"), [("faithful", False), ("fast_mlp", False),
                                                  ("fused_gate_up", False),
                                                  ("wrong_mlp", True), ("skip_mlp", True)])
def test_shared_hook_on_sglang_named_toy_writes_receipts(tmp_path: Path, name: str,
                                                         violating: bool) -> None:
    spec = AuditSpec(registered(name), receipts_dir=str(tmp_path))
    expected, got = _toy_run(spec)
    assert torch.equal(expected, got)  # the hook never changes the stock output
    tallies = read_receipts(str(tmp_path), spec.session)
    assert [(t.node, t.calls) for t in tallies] == [("model.layers.0.mlp", 3),
                                                    ("model.layers.1.mlp", 3)]
    for tally in tallies:
        assert tally.violations == (3 if violating else 0)
        assert tally.uncomparable == 0


def test_installer_hook_swaps_the_sglang_style_mlp(tmp_path: Path) -> None:
    toy = ToyCausalLM()
    x = torch.randn(3, 8)
    stock = toy.forward(x)
    specs = delta_install_specs(registered("skip_mlp"), receipts_dir=str(tmp_path), session="s")
    register_forward_hooks(toy, specs)
    assert torch.equal(toy.forward(x), x)  # every MLP now returns zeros
    assert not torch.equal(stock, x)
    [receipt] = read_install_receipts(str(tmp_path), "s")
    assert receipt["nodes"] == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert receipt["delta_digest"] == registered("skip_mlp").digest


def test_a_session_grades_tuple_outputs_and_keeps_the_first_error_cut_short(
        tmp_path: Path) -> None:
    # SGLang modules may return (tensor, extra): both sides are graded on the first tensor.
    paired = _delta_file(tmp_path, "paired", "return (x.clone(), 'extra')")
    raising = _delta_file(tmp_path, "raising", "raise RuntimeError('e' * 500)")
    stock, x = nn.Identity(), torch.ones(2, 3)
    graded = AuditSession(AuditSpec(load_file_delta(paired), ("model",)).to_config())
    graded.bind_names(stock)
    graded.observe(stock, (x,), (x, "stock extra"))
    [tally] = graded.snapshot()
    assert (tally.node, tally.calls, tally.uncomparable, tally.min_score) == ("model", 1, 0, 1.0)

    failing = AuditSession(AuditSpec(load_file_delta(raising), ("model",)).to_config())
    failing.bind_names(stock)
    failing.observe(stock, (x,), x)
    failing.candidates[id(stock)] = nn.Sequential(nn.Flatten(0, -1), nn.Unflatten(0, (3, 3)))
    failing.observe(stock, (x,), x)  # a different failure: the first one is kept
    [tally] = failing.snapshot()
    assert (tally.calls, tally.uncomparable) == (2, 2)
    assert tally.first_error == ("RuntimeError: " + "e" * 500)[:200]


@pytest.mark.parametrize(("raised", "name"), [
    ("torch.OutOfMemoryError('CUDA out of memory')", "OutOfMemoryError"),
    ("MemoryError('host memory')", "MemoryError"),
    ("OSError('disk gone')", "OSError"),
    ("__import__('vocabulary.errors').errors.IntegrityError('weights unreadable')",
     "IntegrityError"),
])
def test_a_host_failure_in_the_candidate_call_is_a_fault_not_uncomparable(
        tmp_path: Path, raised: str, name: str) -> None:
    # docs/engine.md: only NaN, Inf or a shape mismatch (and the candidate's own computation
    # failing) is uncomparable; the host running out of memory is no miner's FAIL.
    failing = _delta_file(tmp_path, "host", f"raise {raised}")
    stock, x = nn.Identity(), torch.ones(2, 3)
    session = AuditSession(AuditSpec(load_file_delta(failing), ("model",)).to_config())
    session.bind_names(stock)
    session.observe(stock, (x,), x)
    [tally] = session.snapshot()
    assert (tally.calls, tally.uncomparable) == (0, 0)
    with pytest.raises(EngineFault) as fault:
        tallies_to_payloads([tally], "0.99999")
    assert (fault.value.fault_code, fault.value.stage) == (
        "unproven_infrastructure_failure", "audit")
    assert f"model (rank 0): {name}: " in fault.value.message


def test_a_candidate_that_can_no_longer_be_built_is_a_fault_not_uncomparable(
        tmp_path: Path) -> None:
    path = _delta_file(tmp_path, "changed", "return x")
    spec = load_file_delta(path)
    path.write_text(path.read_text() + "# edited after it was digested\n")
    stock, x = nn.Identity(), torch.ones(2, 3)
    session = AuditSession(AuditSpec(spec, ("model",)).to_config())
    session.bind_names(stock)
    session.observe(stock, (x,), x)
    with pytest.raises(EngineFault, match="IntegrityError") as fault:
        tallies_to_payloads(session.snapshot(), "0.99999")
    assert fault.value.fault_code == "unproven_infrastructure_failure"


def test_a_host_failure_on_the_reference_engine_faults_the_audit(
        engine: TorchReferenceEngine, tmp_path: Path) -> None:
    oom = _delta_file(tmp_path, "oom", "raise torch.OutOfMemoryError('simulated')")
    with pytest.raises(EngineFault) as fault:
        _audit(engine, load_file_delta(oom))
    assert (fault.value.fault_code, fault.value.stage) == (
        "unproven_infrastructure_failure", "audit")
    assert engine.lanes == []
