"""Names the reference Llama: its shape, seed, file names and the digest of its weights.

The engine port and its lanes name the reference model without building it, so this part
needs no numpy (the ``engine`` extra); ``reference_model`` builds and loads the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CONFIG_FILE",
    "REFERENCE_SEED",
    "REFERENCE_SPEC",
    "REFERENCE_WEIGHTS_SHA256",
    "WEIGHTS_FILE",
    "ReferenceModelSpec",
]

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
REFERENCE_SEED = 20_250_101


@dataclass(frozen=True)
class ReferenceModelSpec:
    """Describes the reference Llama's shape (about 1.1 M parameters by default)."""

    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256


REFERENCE_SPEC = ReferenceModelSpec()

#: sha256 of ``model.safetensors`` for (REFERENCE_SPEC, REFERENCE_SEED); pinned by a test.
REFERENCE_WEIGHTS_SHA256 = "8f84ec2fbf70221195567d8bf032738d5de23c2791d89b0ab56922d089da321b"
