"""Routing shape metadata: how a flat routing column maps to [tokens, layers, top_k]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .generated import routing_value_type

META_SCHEMA_VERSION = b"lego.schema_version"
META_RECORD = b"lego.record"
META_LAYERS = b"lego.routing.layers"
META_TOP_K = b"lego.routing.top_k"
META_NUM_EXPERTS = b"lego.routing.num_experts"


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingShape:
    """MoE routing layout shared by every routing column of one batch."""

    layers: int
    """MoE layers that record routing (dense layers are not counted)."""
    top_k: int
    """Experts chosen per token per layer."""
    num_experts: int
    """Experts per layer; decides the storage type (uint8 up to 256, else uint16)."""

    def __post_init__(self) -> None:
        if self.layers <= 0 or self.top_k <= 0 or self.num_experts <= 0:
            raise ValueError(f"routing shape needs positive sizes, got {self}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if self.num_experts > 65536:
            raise ValueError(f"{self.num_experts} experts do not fit uint16 routing ids")

    @property
    def per_token(self) -> int:
        """Routing values per token (layers * top_k)."""
        return self.layers * self.top_k

    @property
    def numpy_dtype(self) -> type[np.unsignedinteger]:
        return np.uint8 if self.num_experts <= 256 else np.uint16

    @property
    def arrow_type(self) -> pa.DataType:
        return routing_value_type(self.num_experts)

    def view(self, flat: npt.NDArray[np.unsignedinteger]) -> npt.NDArray[np.unsignedinteger]:
        """Reshapes a flat routing array to [tokens, layers, top_k] without copying."""
        return flat.reshape(-1, self.layers, self.top_k)

    def metadata(self) -> dict[bytes, bytes]:
        return {
            META_LAYERS: str(self.layers).encode(),
            META_TOP_K: str(self.top_k).encode(),
            META_NUM_EXPERTS: str(self.num_experts).encode(),
        }

    @staticmethod
    def from_metadata(metadata: dict[bytes, bytes]) -> RoutingShape | None:
        """None for a dense model (no routing keys at all)."""
        keys = (META_LAYERS, META_TOP_K, META_NUM_EXPERTS)
        present = [k in metadata for k in keys]
        if not any(present):
            return None
        if not all(present):
            missing = [k.decode() for k, p in zip(keys, present) if not p]
            raise ValueError(f"routing metadata is incomplete: missing {', '.join(missing)}")
        return RoutingShape(
            layers=int(metadata[META_LAYERS]),
            top_k=int(metadata[META_TOP_K]),
            num_experts=int(metadata[META_NUM_EXPERTS]),
        )
