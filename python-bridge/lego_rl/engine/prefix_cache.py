"""Prefix cache: the keys, values and routing of full prefill chunks, kept for later requests.

Shape legend: N stored chunks, C tokens per chunk (`EngineConfig.prefill_chunk`), L decoder
layers, G key/value heads, Dh head width, M MoE layers, K experts per token.

1. The unit is a prefill chunk: the tokens at absolute positions [jC, (j+1)C) of one
   sequence, computed in one forward pass. The engine prefills in exactly these aligned
   chunks, so a chunk's keys depend only on the tokens up to its end and on the chunk
   boundaries, which are the same for every request with that prefix. A chunk taken from
   here is therefore the chunk the request would have computed (bit for bit, under the
   same batch composition), and its routing rows are the ones recorded when it was
   computed. Partial chunks (a prompt's tail) and decoded tokens are never stored: their
   keys came from differently shaped passes than a later prefill would run.
2. Chunks are identified like vLLM's blocks: by their parent chunk and their own tokens, the
   root additionally by the policy version, so a chain of keys names a whole prefix and a
   cache entry from another version can never match. The engine also empties the cache on
   every weight update (nothing old could match anyway; it frees the memory at once).
   Keys are the token tuples themselves (Python's dict hashes and compares them), so two
   prefixes never collide.
3. Bounded memory: at most `max_chunks` chunks, storage grown by doubling up to that. When
   full, the least recently used chunk goes. Every lookup and insert refreshes a chain
   from its last chunk back to the root, so a parent is always more recent than its
   children and eviction only ever takes a leaf (SGLang's radix cache evicts leaves the
   same way); no chain is ever cut in the middle.
4. Requests copy chunks into their own KV slot; nothing here is shared with a running
   request, so evicting never disturbs one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lego_rl.model import Config, KVCache

ChunkKey = tuple[int, int, tuple[int, ...]]
"""(parent chunk id or -1, policy version at the root else -1, the chunk's token ids)."""


@dataclass(slots=True)
class _Chunk:
    key: ChunkKey
    parent: int
    """Id of the chunk before it, -1 at the root."""
    row: int
    """Where its tensors sit in the store."""
    children: int = 0


class PrefixCache:
    """Full prefill chunks of earlier requests, looked up by prefix; see the module docstring."""

    def __init__(self, config: Config, *, chunk: int, max_chunks: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        if chunk < 1 or max_chunks < 1:
            raise ValueError(f"chunk and max_chunks must be >= 1, got {chunk}, {max_chunks}")
        self.chunk = chunk
        self.max_chunks = max_chunks
        self._kv_shape = (config.num_hidden_layers, config.num_key_value_heads, chunk, config.head_dim)
        self._routing_shape = (chunk, len(config.moe_layers), config.num_experts_per_tok)
        self._dtype, self._device = dtype, device
        self.evictions = 0
        self._next_id = 0
        """Chunk ids are never reused (not even after `clear`), so a stale parent id cannot name another chunk."""
        self._reset()

    def _reset(self) -> None:
        self.k_NLGCDh = torch.empty((0, *self._kv_shape), dtype=self._dtype, device=self._device)
        self.v_NLGCDh = torch.empty((0, *self._kv_shape), dtype=self._dtype, device=self._device)
        self.routing_NCMK = torch.empty((0, *self._routing_shape), dtype=torch.int16)
        self._chunks: dict[int, _Chunk] = {}
        self._ids: dict[ChunkKey, int] = {}
        self._recency: OrderedDict[int, None] = OrderedDict()
        """Chunk ids, least recently used first."""

    @staticmethod
    def bytes_per_chunk(config: Config, chunk: int, dtype: torch.dtype) -> int:
        """Memory one stored chunk takes: keys and values of every layer, plus its routing rows."""
        kv = 2 * config.num_hidden_layers * config.num_key_value_heads * chunk * config.head_dim * dtype.itemsize
        return kv + chunk * len(config.moe_layers) * config.num_experts_per_tok * 2

    @property
    def stored_chunks(self) -> int:
        return len(self._chunks)

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the store's tensors (grown by doubling, never past `max_chunks` chunks)."""
        return sum(t.numel() * t.element_size() for t in (self.k_NLGCDh, self.v_NLGCDh, self.routing_NCMK))

    def key(self, parent: int, version: int, tokens: Sequence[int]) -> ChunkKey:
        return (parent, version if parent < 0 else -1, tuple(tokens))

    def lookup(self, parent: int, version: int, tokens: Sequence[int], start: int, limit: int) -> list[int]:
        """Ids of the cached chunks continuing `parent` over tokens[start:limit], in order.

        `start` must be a chunk boundary (the end of `parent`); only whole chunks ending at
        or before `limit` count. The chain found is refreshed as most recently used.
        """
        found: list[int] = []
        C = self.chunk
        while start + C <= limit:
            cid = self._ids.get(self.key(parent, version, tokens[start : start + C]))
            if cid is None:
                break
            found.append(cid)
            parent, start = cid, start + C
        if found:
            self._refresh(found[-1])
        return found

    def load(self, ids: list[int], cache: KVCache, start: int) -> torch.Tensor:
        """Copy chunks `ids` into `cache` at positions [start, start + len(ids) * C); returns their routing [n * C, M, K]."""
        if cache.length != start:
            raise ValueError(f"the cache holds {cache.length} positions; chunks load at its end, {start}")
        n = len(ids) * self.chunk
        cache.reserve(start + n)
        pool = cache._pool()
        rows = torch.tensor([self._chunks[i].row for i in ids], device=self.k_NLGCDh.device)
        L, G, C, Dh = self._kv_shape
        for store, dest in ((self.k_NLGCDh, pool.k_LNGSDh), (self.v_NLGCDh, pool.v_LNGSDh)):
            dest[:, cache.slot, :, start : start + n] = store.index_select(0, rows).permute(1, 2, 0, 3, 4).reshape(L, G, n, Dh)
        cache.length = start + n
        return self.routing_NCMK.index_select(0, rows.cpu()).reshape(n, *self._routing_shape[1:])

    def insert(self, parent: int, version: int, tokens: Sequence[int], cache: KVCache, start: int, routing_CMK: torch.Tensor) -> int | None:
        """Store the chunk `cache` holds at [start, start + C) as the child of `parent`; its id, or None.

        None when `parent` was evicted meanwhile (the chain is broken, so nothing after it
        could be found) or when every stored chunk is an ancestor of this one. An identical
        chunk already stored is refreshed and its id returned.
        """
        key = self.key(parent, version, tokens)
        existing = self._ids.get(key)
        if existing is not None:
            self._refresh(existing)
            return existing
        if parent >= 0 and parent not in self._chunks:
            return None
        if parent >= 0:
            self._refresh(parent)  # its ancestors must outlive the eviction below
        row = self._take_row(protect=parent)
        if row is None:
            return None
        pool = cache._pool()
        C = self.chunk
        self.k_NLGCDh[row] = pool.k_LNGSDh[:, cache.slot, :, start : start + C]
        self.v_NLGCDh[row] = pool.v_LNGSDh[:, cache.slot, :, start : start + C]
        self.routing_NCMK[row] = routing_CMK
        cid = self._next_id
        self._next_id += 1
        self._chunks[cid] = _Chunk(key=key, parent=parent, row=row)
        self._ids[key] = cid
        if parent >= 0:
            self._chunks[parent].children += 1
        self._recency[cid] = None
        self._refresh(cid)
        return cid

    def clear(self) -> None:
        """Forget every chunk and free the storage (weights changed: nothing stored can match)."""
        self._reset()

    # ---- internals ----------------------------------------------------------------

    def _refresh(self, cid: int) -> None:
        """Mark a chain used now: the chunk first, then each ancestor, so parents stay newer than children."""
        while cid >= 0:
            self._recency.move_to_end(cid)
            cid = self._chunks[cid].parent

    def _take_row(self, *, protect: int) -> int | None:
        """A free storage row: a new one while below `max_chunks` (an evicted chunk's row is reused at
        once, so rows 0..stored-1 are the ones in use), else the row of the least recently used leaf
        that is not an ancestor of `protect`."""
        used = len(self._chunks)
        if used < self.max_chunks:
            if used == self.k_NLGCDh.shape[0]:
                self._grow(min(self.max_chunks, max(1, 2 * used)))
            return used
        ancestors = set()
        while protect >= 0:
            ancestors.add(protect)
            protect = self._chunks[protect].parent
        victim = next((cid for cid in self._recency if cid not in ancestors and self._chunks[cid].children == 0), None)
        if victim is None:
            return None
        return self._evict(victim)

    def _evict(self, cid: int) -> int:
        chunk = self._chunks.pop(cid)
        del self._ids[chunk.key]
        del self._recency[cid]
        if chunk.parent >= 0:
            self._chunks[chunk.parent].children -= 1
        self.evictions += 1
        return chunk.row

    def _grow(self, rows: int) -> None:
        old = self.k_NLGCDh.shape[0]
        for name, shape, dtype in (("k_NLGCDh", self._kv_shape, self._dtype), ("v_NLGCDh", self._kv_shape, self._dtype),
                                   ("routing_NCMK", self._routing_shape, torch.int16)):
            grown = torch.empty((rows, *shape), dtype=dtype, device="cpu" if name == "routing_NCMK" else self._device)
            grown[:old] = getattr(self, name)
            setattr(self, name, grown)

