"""Builds the tiny reference Llama deterministically and loads it back from disk.

The weights come from a counter-based generator (SplitMix64) that this module owns, so
the bytes depend on the seed and the spec only, not on torch's or transformers' init
code. The model folder is a plain Hugging Face folder (``config.json`` plus
``model.safetensors``) that ``LlamaForCausalLM.from_pretrained`` and SGLang can load;
nothing is fetched from a hub. Writing the folder needs numpy and safetensors only;
loading it imports torch and transformers lazily.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine_bridge.reference_spec import (
    CONFIG_FILE,
    REFERENCE_SEED,
    REFERENCE_SPEC,
    REFERENCE_WEIGHTS_SHA256,
    WEIGHTS_FILE,
    ReferenceModelSpec,
)
from vocabulary.errors import IntegrityError

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

__all__ = [
    "REFERENCE_SEED",
    "REFERENCE_SPEC",
    "REFERENCE_WEIGHTS_SHA256",
    "WEIGHTS_FILE",
    "ReferenceModelSpec",
    "ensure_reference_model",
    "load_reference_model",
    "reference_config",
    "reference_tensors",
    "splitmix_uniform",
    "weights_sha256",
    "write_reference_model",
]


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)




def splitmix_uniform(key: int, count: int) -> np.ndarray:
    """Returns ``count`` float64 values in [-1, 1) from SplitMix64 over a counter at ``key``.

    Each value is a multiple of 2**-23, so it is exact in float32 and on every platform.
    """
    counter = np.arange(count, dtype=np.uint64) + np.uint64(key & 0xFFFFFFFFFFFFFFFF)
    z = (counter * _GOLDEN) & _MASK64
    z = ((z ^ (z >> np.uint64(30))) * _MIX1) & _MASK64
    z = ((z ^ (z >> np.uint64(27))) * _MIX2) & _MASK64
    z = z ^ (z >> np.uint64(31))
    top24 = (z >> np.uint64(40)).astype(np.float64)
    return top24 / float(1 << 23) - 1.0


def _tensor_key(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _shapes(spec: ReferenceModelSpec) -> dict[str, tuple[int, ...]]:
    h, i, v = spec.hidden_size, spec.intermediate_size, spec.vocab_size
    head_dim = h // spec.num_attention_heads
    kv = spec.num_key_value_heads * head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (v, h),
        "model.norm.weight": (h,),
        "lm_head.weight": (v, h),
    }
    for layer in range(spec.num_hidden_layers):
        p = f"model.layers.{layer}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (h, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, h),
            f"{p}.mlp.gate_proj.weight": (i, h),
            f"{p}.mlp.up_proj.weight": (i, h),
            f"{p}.mlp.down_proj.weight": (h, i),
        }
    return shapes


def reference_tensors(
    spec: ReferenceModelSpec = REFERENCE_SPEC, seed: int = REFERENCE_SEED
) -> dict[str, np.ndarray]:
    """Returns every weight as float32, uniform with std 1/sqrt(fan_in); norms are ones.

    Fan-in scaling keeps activations of order one through the layers, so a wrong
    activation or a skipped MLP moves node outputs far more than float32 noise does.
    """
    tensors: dict[str, np.ndarray] = {}
    for name, shape in sorted(_shapes(spec).items()):
        if name.endswith("norm.weight"):
            tensors[name] = np.ones(shape, dtype=np.float32)
            continue
        fan_in = shape[-1]
        scale = math.sqrt(3.0 / fan_in)  # uniform(-a, a) has std a/sqrt(3)
        values = splitmix_uniform(_tensor_key(seed, name), math.prod(shape)) * scale
        tensors[name] = values.astype(np.float32).reshape(shape)
    return tensors


def reference_config(spec: ReferenceModelSpec = REFERENCE_SPEC) -> dict[str, Any]:
    """Returns the ``config.json`` content of the reference model."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **asdict(spec),
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def write_reference_model(
    directory: str | os.PathLike[str],
    spec: ReferenceModelSpec = REFERENCE_SPEC,
    seed: int = REFERENCE_SEED,
) -> Path:
    """Writes ``config.json`` and ``model.safetensors`` into ``directory`` and returns it."""
    from safetensors.numpy import save_file

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    config_text = json.dumps(reference_config(spec), indent=2, sort_keys=True) + "\n"
    (target / CONFIG_FILE).write_text(config_text, encoding="utf-8")
    # Write under a temporary name first so a crash never leaves a half file behind.
    with tempfile.NamedTemporaryFile(dir=target, suffix=".tmp", delete=False) as handle:
        tmp_path = Path(handle.name)
    save_file(reference_tensors(spec, seed), str(tmp_path), metadata={"format": "pt"})
    tmp_path.replace(target / WEIGHTS_FILE)
    return target


def weights_sha256(directory: str | os.PathLike[str]) -> str:
    """Returns the sha256 hex of the folder's ``model.safetensors``."""
    digest = hashlib.sha256()
    with open(Path(directory) / WEIGHTS_FILE, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_reference_model(directory: str | os.PathLike[str]) -> Path:
    """Returns a folder holding the pinned reference model, writing it when absent or stale."""
    target = Path(directory)
    weights = target / WEIGHTS_FILE
    present = weights.exists() and (target / CONFIG_FILE).exists()
    if present and weights_sha256(target) == REFERENCE_WEIGHTS_SHA256:
        return target
    return write_reference_model(target)


def load_reference_model(
    directory: str | os.PathLike[str], *, expected_sha256: str | None = None
) -> LlamaForCausalLM:
    """Loads the folder as an eval-mode float32 ``LlamaForCausalLM`` from local files only."""
    if expected_sha256 is not None:
        actual = weights_sha256(directory)
        if actual != expected_sha256:
            raise IntegrityError(
                f"reference weights in {directory} have sha256 {actual}, expected "
                f"{expected_sha256}; rebuild them with write_reference_model",
                directory=str(directory), actual=actual, expected=expected_sha256,
            )
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # lanes stay quiet
    model = LlamaForCausalLM.from_pretrained(
        str(directory), local_files_only=True, dtype=torch.float32
    )
    model.eval()  # type: ignore[no-untyped-call]
    return model
