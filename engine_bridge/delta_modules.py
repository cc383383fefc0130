"""Implements the registered MLP deltas as torch modules (an adapter module: imports torch).

Every candidate is built from the stock MLP it replaces and reads that module's weights,
so a delta changes code, never parameters. :func:`mlp_weights` reads both the Hugging Face
layout (``gate_proj``/``up_proj``/``down_proj``) and SGLang's (``gate_up_proj``/
``down_proj``), so the same delta serves the reference engine and SGLang (tp_size 1).
Candidates accept and ignore extra positional/keyword arguments, because SGLang's MLP
``forward`` takes more than the hidden states. A candidate never calls the stock module
through ``__call__`` (only ``forward`` or its sub-modules): the stock module may carry the
audit hook, which must not see the candidate's own calls.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from engine_bridge.threads import pin_single_thread_env

pin_single_thread_env()  # before torch: no-op if the process already imported torch

import torch  # noqa: E402  (thread variables must be set first)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from vocabulary.errors import InvalidInput  # noqa: E402

__all__ = [
    "FaithfulMLP",
    "FastMLP",
    "FusedGateUpMLP",
    "MlpWeights",
    "ScaledMLP",
    "SkipMLP",
    "SlowMLP",
    "WrongActivationMLP",
    "build_from_file",
    "build_registered",
    "mlp_weights",
]

Activation = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class MlpWeights:
    """Holds a gated MLP's weights (gate, up: [I, H]; down: [H, I]) and its activation."""

    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    act: Activation


def mlp_weights(stock: Any) -> MlpWeights:
    """Reads a stock gated MLP's weights from the Hugging Face or SGLang layout."""
    if hasattr(stock, "gate_proj") and hasattr(stock, "up_proj"):
        act = getattr(stock, "act_fn", F.silu)
        return MlpWeights(stock.gate_proj.weight, stock.up_proj.weight,
                          stock.down_proj.weight, act)
    if hasattr(stock, "gate_up_proj"):
        gate, up = stock.gate_up_proj.weight.chunk(2, dim=0)
        act_name = type(getattr(stock, "act_fn", None)).__name__
        merged_act: Activation = F.gelu if act_name.startswith("Gelu") else F.silu
        return MlpWeights(gate, up, stock.down_proj.weight, merged_act)
    raise InvalidInput(f"{type(stock).__name__} is not a gated MLP this bridge can read",
                       module_type=type(stock).__name__)


class FaithfulMLP(nn.Module):
    """Computes the stock math through the stock sub-modules, up projection first.

    Keeping the sub-module calls keeps the cost of the stock path (a speed-neutral
    control); only the evaluation order differs. SGLang's merged layout has no separate
    sub-modules, so there it computes the same math functionally.
    """

    def __init__(self, stock: Any) -> None:
        super().__init__()
        self.stock = stock
        self.hf_layout = hasattr(stock, "gate_proj") and hasattr(stock, "act_fn")
        self.weights = None if self.hf_layout else mlp_weights(stock)

    def forward(self, x: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        """Returns down(act(gate(x)) * up(x)), evaluating up before gate."""
        if self.hf_layout:
            up = self.stock.up_proj(x)
            gate = self.stock.act_fn(self.stock.gate_proj(x))
            out: torch.Tensor = self.stock.down_proj(gate * up)
            return out
        w = self.weights
        assert w is not None
        up = F.linear(x, w.up)
        return F.linear(w.act(F.linear(x, w.gate)) * up, w.down)


def _is_silu(act: Any) -> bool:
    return act is F.silu or isinstance(act, nn.SiLU) or type(act).__name__ in (
        "SiLUActivation", "SiluAndMul")


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    # A [in, out] copy: ``x @ w`` on it runs MKL's plain GEMM, which for a few rows is
    # about twice as fast here as ``F.linear``'s transposed-weight GEMM on [out, in].
    return weight.detach().t().contiguous()


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


class FastMLP(nn.Module):
    """Computes the stock math with pre-transposed weights, SiLU and the multiply in place.

    At boot it copies the three weights once, transposed to [in, out]; each call then
    runs three plain ``torch.mm`` on the rows of ``x`` (no ``nn.Module.__call__``
    dispatch, no transposed-weight GEMM), SiLU in place on the gate and the multiply in
    place, so it allocates two intermediate tensors instead of four. The GEMMs sum in
    another order than stock's, so outputs differ from stock by float32 rounding
    (relative error about 1e-7, audit score >= 0.9999998).
    """

    def __init__(self, stock: Any) -> None:
        super().__init__()
        w = mlp_weights(stock)
        # Plain attributes, not buffers: derived from the stock weights, never saved.
        self.gate_t, self.up_t, self.down_t = (_transposed(w.gate), _transposed(w.up),
                                               _transposed(w.down))
        self.act = w.act
        self.silu = _is_silu(w.act)

    def forward(self, x: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        """Returns down(act(gate x) * up x) as three GEMMs on pre-transposed weights."""
        rows = _rows(x)
        hidden = torch.mm(rows, self.gate_t)
        if self.silu:
            F.silu(hidden, inplace=True)
        else:
            hidden = self.act(hidden)
        hidden.mul_(torch.mm(rows, self.up_t))
        return torch.mm(hidden, self.down_t).view(*x.shape[:-1], self.down_t.shape[1])


class FusedGateUpMLP(nn.Module):
    """Computes gate and up in one GEMM over concatenated, pre-transposed weights, then down.

    This is the GPU trick (one kernel launch and one read of ``x`` instead of two). On the
    CPU reference the gain comes from the pre-transposed [in, out] layout (as in
    :class:`FastMLP`); the fused GEMM itself costs about what the two narrower ones do.
    SiLU and the multiply run in place on the two halves of the fused output.
    """

    def __init__(self, stock: Any) -> None:
        super().__init__()
        w = mlp_weights(stock)
        self.intermediate = int(w.gate.shape[0])
        # Plain attributes, not buffers: derived from the stock weights, never saved.
        self.gate_up_t = _transposed(torch.cat([w.gate, w.up], 0))
        self.down_t = _transposed(w.down)
        self.act = w.act
        self.silu = _is_silu(w.act)

    def forward(self, x: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        """Returns down(act(gate x) * up x) with the gate/up projections fused."""
        fused = torch.mm(_rows(x), self.gate_up_t)
        gate, up = fused[:, :self.intermediate], fused[:, self.intermediate:]
        hidden = F.silu(gate, inplace=True) if self.silu else self.act(gate)
        hidden.mul_(up)
        return torch.mm(hidden, self.down_t).view(*x.shape[:-1], self.down_t.shape[1])


class WrongActivationMLP(nn.Module):
    """Computes the MLP with exact GELU in place of the stock activation."""

    def __init__(self, stock: nn.Module) -> None:
        super().__init__()
        self.weights = mlp_weights(stock)

    def forward(self, x: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        """Returns down(gelu(gate x) * up x)."""
        w = self.weights
        return F.linear(F.gelu(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)


class SkipMLP(nn.Module):
    """Returns zeros shaped like the stock output, skipping the MLP entirely."""

    def forward(self, x: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        """Returns a zero tensor with the input's shape and dtype."""
        return torch.zeros_like(x)


class ScaledMLP(nn.Module):
    """Returns the stock output multiplied by (1 + epsilon)."""

    def __init__(self, stock: Any, epsilon: Decimal) -> None:
        super().__init__()
        self.stock = stock
        self.factor = float(1 + epsilon)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Returns stock(x) * (1 + epsilon)."""
        # ``forward``, not ``__call__``: the stock module may carry the audit hook.
        out: torch.Tensor = self.stock.forward(x, *args, **kwargs) * self.factor
        return out


class SlowMLP(nn.Module):
    """Computes the stock output ``repeats`` times and returns the last, identical result."""

    def __init__(self, stock: Any, repeats: int) -> None:
        super().__init__()
        self.stock = stock
        self.repeats = repeats

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Returns stock(x), having computed it ``repeats`` times."""
        out: torch.Tensor = self.stock.forward(x, *args, **kwargs)
        for _ in range(self.repeats - 1):
            out = self.stock.forward(x, *args, **kwargs)
        return out


def build_registered(name: str, params: Mapping[str, str], stock: nn.Module) -> nn.Module:
    """Builds the candidate module of a registered delta around ``stock``."""
    if name in ("faithful", "engine_kill", "pod_restart"):
        # The fault controls compute stock math; their lane misbehaves, not their output.
        return FaithfulMLP(stock)
    if name == "fast_mlp":
        return FastMLP(stock)
    if name == "fused_gate_up":
        return FusedGateUpMLP(stock)
    if name == "wrong_mlp":
        return WrongActivationMLP(stock)
    if name == "skip_mlp":
        return SkipMLP()
    if name == "scaled":
        return ScaledMLP(stock, Decimal(params["epsilon"]))
    if name == "slow":
        return SlowMLP(stock, int(params["repeats"]))
    raise InvalidInput(f"no module for registered delta {name!r}", name=name)


def build_from_file(path: str, entry_point: str, sha256: str, stock: nn.Module) -> nn.Module:
    """Imports a user delta file (once per digest) and calls its entry point on ``stock``."""
    module_name = f"arena_delta_{sha256[:16]}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise InvalidInput(f"cannot import delta file {path}", path=path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[module_name] = module
    candidate = getattr(module, entry_point)(stock)
    if not isinstance(candidate, nn.Module):
        raise InvalidInput(f"{path}:{entry_point} returned {type(candidate).__name__}, "
                           "expected a torch.nn.Module", path=path)
    return candidate
