"""Checks the delta modules' math and loading (engine_bridge.deltas, delta_modules) in torch.

The reference model's MLP is SiLU, so these tests give the stock module other activations: a
delta that ignored the stock's own activation would still pass on the reference model. They
pin, from docs/engine.md and the modules' docstrings:

* a candidate computes the stock math with the stock's own activation, read from
  ``act_fn`` in the Hugging Face layout and from the activation's class (``GeluAndMul``)
  in SGLang's merged layout;
* ``wrong_mlp`` uses exact (erf) GELU, ``skip_mlp`` returns zeros of the input's shape and
  dtype, ``scaled`` multiplies by exactly (1 + epsilon) with the spec's epsilon, ``slow``
  calls ``stock.forward`` exactly ``repeats`` times, and ``engine_kill``/``pod_restart``
  compute the stock math;
* no candidate reaches the stock module through ``__call__`` (its hooks never fire);
* a module that is not a gated MLP, or a registered name with no module, is refused as
  ``InvalidInput``; so is a file delta whose entry point returns no ``nn.Module``;
* a delta file is imported once per digest, and two files with different digests never
  share a module;
* ``load_file_delta``'s ``entry_point`` argument beats the file's declaration; only a
  top-level ``ARENA_DELTA_ENTRY_POINT = "<str>"`` declares; a function nested in a class
  is not a top-level entry point;
* ``DeltaSpec.from_dict`` re-validates a registered spec and fills in its defaults;
* a stock without ``act_fn`` is read as SiLU, and ``install_delta`` never reports the root
  module (it has no parent to be replaced in) as installed.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

from engine_bridge.deltas import (
    DeltaSpec,
    build_candidate,
    install_delta,
    load_file_delta,
    registered,
)
from vocabulary.errors import InvalidInput

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from engine_bridge.delta_modules import (  # noqa: E402
    SkipMLP,
    build_from_file,
    build_registered,
    mlp_weights,
)

HIDDEN, INTER = 8, 16


class HfMLP(nn.Module):
    """A Hugging Face-layout gated MLP with a chosen activation; counts ``forward`` calls."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)
        self.act_fn = act
        self.forwards = 0

    def forward(self, x: Any, *_: Any, **__: Any) -> Any:
        self.forwards += 1
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class GeluAndMul(nn.Module):
    """Mimics SGLang's fused GELU activation: gelu(first half) * second half."""

    def forward(self, x: Any) -> Any:
        gate, up = x.chunk(2, dim=-1)
        return F.gelu(gate) * up


class SglangGeluMLP(nn.Module):
    """SGLang's merged layout (``gate_up_proj``/``down_proj``) with a GELU activation."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.gate_up_proj = nn.Linear(HIDDEN, 2 * INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)
        self.act_fn = GeluAndMul()

    def forward(self, x: Any, forward_batch: Any = None) -> Any:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


def _x() -> Any:
    torch.manual_seed(3)
    return torch.randn(4, HIDDEN) * 3


def _exact_gelu(h: Any) -> Any:
    return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))


@pytest.mark.parametrize("name", ["faithful", "fast_mlp", "fused_gate_up"])
def test_stock_math_uses_the_stock_activation_in_the_hf_layout(name: str) -> None:
    stock, x = HfMLP(nn.GELU()), _x()
    with torch.no_grad():
        expected = stock.down_proj(_exact_gelu(stock.gate_proj(x)) * stock.up_proj(x))
        got = build_candidate(registered(name), stock)(x, None, extra=1)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("name", ["faithful", "fast_mlp", "fused_gate_up"])
def test_stock_math_reads_a_gelu_activation_in_the_merged_layout(name: str) -> None:
    stock, x = SglangGeluMLP(), _x()
    with torch.no_grad():
        gate, up = F.linear(x, stock.gate_up_proj.weight).chunk(2, dim=-1)
        expected = F.linear(_exact_gelu(gate) * up, stock.down_proj.weight)
        got = build_candidate(registered(name), stock)(x, None)
    torch.testing.assert_close(got, expected)


def test_wrong_mlp_is_exact_gelu_in_place_of_silu() -> None:
    stock, x = HfMLP(nn.SiLU()), _x()
    with torch.no_grad():
        hidden = _exact_gelu(x @ stock.gate_proj.weight.T) * (x @ stock.up_proj.weight.T)
        expected = hidden @ stock.down_proj.weight.T
        got = build_candidate(registered("wrong_mlp"), stock)(x)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_skip_mlp_returns_zeros_of_the_input_shape_and_dtype() -> None:
    x = _x()
    out = SkipMLP()(x, None, forward_batch=None)
    assert out.dtype == x.dtype == torch.float32
    assert out.shape == x.shape and not out.any()


def test_scaled_multiplies_the_stock_output_by_one_plus_epsilon() -> None:
    stock, x = HfMLP(nn.SiLU()), _x()
    with torch.no_grad():
        expected = stock.forward(x) * 1.5
        got = build_candidate(registered("scaled", epsilon="0.5"), stock)(x)
    torch.testing.assert_close(got, expected)


def test_slow_calls_stock_forward_exactly_repeats_times_and_never_stock_call() -> None:
    stock, x = HfMLP(nn.SiLU()), _x()
    hooked: list[int] = []
    stock.register_forward_hook(lambda *_: hooked.append(1))
    with torch.no_grad():
        expected = stock.forward(x)
        before = stock.forwards
        got = build_candidate(registered("slow", repeats="3"), stock)(x)
    assert stock.forwards - before == 3
    assert torch.equal(got, expected)
    assert hooked == []


def test_scaled_never_calls_the_stock_module_through_call() -> None:
    stock, x = HfMLP(nn.SiLU()), _x()
    hooked: list[int] = []
    stock.register_forward_hook(lambda *_: hooked.append(1))
    with torch.no_grad():
        build_candidate(registered("scaled"), stock)(x)
    assert hooked == []


@pytest.mark.parametrize("name", ["engine_kill", "pod_restart"])
def test_fault_controls_compute_the_stock_math(name: str) -> None:
    stock, x = HfMLP(nn.SiLU()), _x()
    with torch.no_grad():
        torch.testing.assert_close(build_candidate(registered(name), stock)(x), stock.forward(x))


def test_a_registered_name_with_no_module_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="no module for registered delta 'turbo'"):
        build_registered("turbo", {}, HfMLP(nn.SiLU()))


class GateOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)


@pytest.mark.parametrize("stock", [nn.Linear(HIDDEN, HIDDEN), GateOnly()])
def test_a_module_that_is_not_a_gated_mlp_is_invalid_input(stock: nn.Module) -> None:
    with pytest.raises(InvalidInput, match="is not a gated MLP this bridge can read"):
        mlp_weights(stock)


def _file_delta(folder: Path, name: str, body: str) -> DeltaSpec:
    path = folder / f"{name}.py"
    path.write_text(body)
    return load_file_delta(path)


def _forget(*specs: DeltaSpec) -> None:
    for spec in specs:
        sys.modules.pop(f"arena_delta_{spec.digest[:16]}", None)


def test_a_file_delta_must_return_a_module(tmp_path: Path) -> None:
    spec = _file_delta(tmp_path, "noun", "def build_mlp(stock):\n    return 'not a module'\n")
    try:
        with pytest.raises(InvalidInput, match=r"returned str, expected a torch\.nn\.Module"):
            build_candidate(spec, HfMLP(nn.SiLU()))
    finally:
        _forget(spec)


def test_a_delta_file_is_imported_once_per_digest_and_never_shared(tmp_path: Path) -> None:
    log = tmp_path / "imports.log"
    body = (
        "from pathlib import Path\n"
        f"with Path({str(log)!r}).open('a') as f:\n    f.write('{{}}\\n')\n"
        "import torch\n\n"
        "def build_mlp(stock):\n    return torch.nn.{}()\n"
    )
    identity = _file_delta(tmp_path, "identity", body.format("identity", "Identity"))
    tanh = _file_delta(tmp_path, "tanh", body.format("tanh", "Tanh"))
    try:
        stock = HfMLP(nn.SiLU())
        first = build_from_file(str(identity.path), "build_mlp", identity.digest, stock)
        again = build_from_file(str(identity.path), "build_mlp", identity.digest, stock)
        other = build_from_file(str(tanh.path), "build_mlp", tanh.digest, stock)
        assert (type(first), type(again), type(other)) == (nn.Identity, nn.Identity, nn.Tanh)
        assert log.read_text() == "identity\ntanh\n"
    finally:
        _forget(identity, tanh)


def test_the_entry_point_argument_beats_the_declaration(tmp_path: Path) -> None:
    path = tmp_path / "two.py"
    path.write_text(
        'ARENA_DELTA_ENTRY_POINT = "make"\n\n'
        "def make(stock):\n    return stock\n\n"
        "def other(stock):\n    return stock\n"
    )
    assert load_file_delta(path, "other").name == "other"
    assert load_file_delta(path).name == "make"


@pytest.mark.parametrize(
    "declaration", ["ARENA_DELTA_ENTRY_POINT = 3\n", 'OTHER_SETTING = "make"\n']
)
def test_only_a_string_assigned_to_the_declaration_names_the_entry_point(
    tmp_path: Path, declaration: str
) -> None:
    path = tmp_path / "declared.py"
    path.write_text(
        declaration + "\ndef make(stock):\n    return stock\n\n"
        "def build_mlp(stock):\n    return stock\n"
    )
    assert load_file_delta(path).name == "build_mlp"


def test_a_method_is_not_a_top_level_entry_point(tmp_path: Path) -> None:
    path = tmp_path / "method.py"
    path.write_text("class Holder:\n    def build_mlp(self, stock):\n        return stock\n")
    with pytest.raises(InvalidInput, match="defines no top-level function 'build_mlp'"):
        load_file_delta(path)


def test_from_dict_revalidates_a_registered_spec_and_fills_defaults() -> None:
    with pytest.raises(InvalidInput):
        DeltaSpec.from_dict({"kind": "registered", "name": "scaled", "params": {"epsilon": "1e-3"}})
    with pytest.raises(InvalidInput):
        DeltaSpec.from_dict({"kind": "registered", "name": "slow", "params": {"repeats": "0"}})
    spec = DeltaSpec.from_dict({"kind": "registered", "name": "scaled", "params": {}})
    assert dict(spec.params) == {"epsilon": "0.001"}


def test_faithful_on_a_stock_without_act_fn_computes_silu_math() -> None:
    stock, x = HfMLP(nn.SiLU()), _x()
    del stock.act_fn  # mlp_weights reads a missing act_fn as SiLU
    with torch.no_grad():
        expected = stock.down_proj(F.silu(stock.gate_proj(x)) * stock.up_proj(x))
        got = build_candidate(registered("faithful"), stock)(x)
    torch.testing.assert_close(got, expected)


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = HfMLP(nn.SiLU())


def test_install_delta_never_claims_the_root_module() -> None:
    model = Wrapper()
    assert install_delta(model, registered("skip_mlp"), ("model",), prefix="model") == []
    assert install_delta(model, registered("skip_mlp"), ("model.mlp",), prefix="model") == [
        "model.mlp"
    ]
    assert isinstance(model.mlp, SkipMLP)
