"""A KV cache for a changing batch: rows are left-padded so that every row's next token goes into the same
column, which lets sequences of different lengths join and leave between decoding steps."""

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PaddedBatchCache:
    def __init__(self, model_config):
        self._model_config = model_config
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, columns], 1 where a column holds a real token

    @property
    def rows(self) -> int:
        return 0 if self.mask is None else self.mask.shape[0]

    @property
    def columns(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self._model_config)

    def append_rows(self, cache: DynamicCache, mask: torch.Tensor, repeats: list[int]) -> None:
        """Add the rows of a left-padded prefill cache below the current rows, row i repeated repeats[i] times
        (n choices share one prompt; 0 drops a row whose choices all ended at their first token)."""
        index = torch.repeat_interleave(torch.arange(len(repeats)), torch.tensor(repeats))
        if index.numel() == 0:
            return
        mask = mask.index_select(0, index)
        sources: list[tuple[DynamicCache, torch.Tensor, torch.Tensor | None]] = []
        if self.cache is not None and self.mask is not None:
            sources.append((self.cache, self.mask, None))
        sources.append((cache, mask, index))
        width = max(source_mask.shape[1] for _, source_mask, _ in sources)
        merged = self.new_cache()
        for layer_index, layer in enumerate(merged.layers):
            keys, values = [], []
            for source, source_mask, rows in sources:
                source_keys, source_values = _keys_values(plain_layer(source.layers[layer_index]))
                pad = width - source_mask.shape[1]
                keys.append(_pad_left(_select(source_keys, rows), pad))
                values.append(_pad_left(_select(source_values, rows), pad))
            _fill_layer(layer, torch.cat(keys), torch.cat(values))
        self.cache = merged
        self.mask = torch.cat(
            [F.pad(source_mask, (width - source_mask.shape[1], 0)) for _, source_mask, _ in sources]
        )

    def extend_mask_for_step(self) -> torch.Tensor:
        """The attention mask for one decoding step; the new column holds every row's new token."""
        _, mask = self._rows()
        self.mask = F.pad(mask, (0, 1), value=1)
        return self.mask

    def keep_rows(self, indices: list[int]) -> None:
        if len(indices) == self.rows:
            return
        if not indices:
            self.cache, self.mask = None, None
            return
        cache, mask = self._rows()
        index = torch.tensor(indices, dtype=torch.long)
        for layer in cache.layers:
            keys, values = _keys_values(plain_layer(layer))
            _fill_layer(layer, keys.index_select(0, index), values.index_select(0, index))
        self.mask = mask.index_select(0, index)
        self._drop_shared_padding()

    def _drop_shared_padding(self) -> None:
        cache, mask = self._rows()
        leading_padding = int((mask.cumsum(dim=1) == 0).sum(dim=1).min())
        if leading_padding == 0:
            return
        for layer in cache.layers:
            keys, values = _keys_values(plain_layer(layer))
            _fill_layer(layer, keys[:, :, leading_padding:], values[:, :, leading_padding:])
        self.mask = mask[:, leading_padding:]

    def _rows(self) -> tuple[DynamicCache, torch.Tensor]:
        # The cache and the mask are set and cleared together.
        if self.cache is None or self.mask is None:
            raise RuntimeError("the batch has no rows")
        return self.cache, self.mask


def plain_layer(layer: object) -> DynamicLayer:
    if type(layer) is not DynamicLayer:
        raise NotImplementedError(
            f"the embedded server batches full-attention caches only, not {type(layer).__name__}"
        )
    return layer


def _keys_values(layer: DynamicLayer) -> tuple[torch.Tensor, torch.Tensor]:
    # transformers types a layer's tensors as optional: they are None until the layer's first write
    if layer.keys is None or layer.values is None:
        raise RuntimeError("a cache layer was read before it was written")
    return layer.keys, layer.values


def _pad_left(tensor: torch.Tensor, columns: int) -> torch.Tensor:
    # zeros, not garbage: a masked position still multiplies its value vector by an attention weight of 0
    return tensor if columns == 0 else F.pad(tensor, (0, 0, columns, 0))


def _select(tensor: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return tensor if rows is None else tensor.index_select(0, rows)


def _fill_layer(layer, keys: torch.Tensor, values: torch.Tensor) -> None:
    if not layer.is_initialized:
        layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values


def zero_padding(cache: DynamicCache, mask: torch.Tensor) -> None:
    """Zero the keys and values at padded positions, whatever the attention kernel left there."""
    if bool(mask.all()):
        return
    keep = mask.bool()[:, None, :, None]
    for layer in cache.layers:
        keys, values = _keys_values(plain_layer(layer))
        _fill_layer(layer, torch.where(keep, keys, 0.0), torch.where(keep, values, 0.0))
