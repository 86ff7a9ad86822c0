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
        sources = [(self.cache, self.mask, None)] if self.cache is not None else []
        sources.append((cache, mask, index))
        width = max(source_mask.shape[1] for _, source_mask, _ in sources)
        merged = self.new_cache()
        for layer_index, layer in enumerate(merged.layers):
            keys, values = [], []
            for source, source_mask, rows in sources:
                source_layer = _plain_layer(source.layers[layer_index])
                pad = width - source_mask.shape[1]
                keys.append(_pad_left(_select(source_layer.keys, rows), pad))
                values.append(_pad_left(_select(source_layer.values, rows), pad))
            _fill_layer(layer, torch.cat(keys), torch.cat(values))
        self.cache = merged
        self.mask = torch.cat(
            [F.pad(source_mask, (width - source_mask.shape[1], 0)) for _, source_mask, _ in sources]
        )

    def extend_mask_for_step(self) -> torch.Tensor:
        """The attention mask for one decoding step; the new column holds every row's new token."""
        self.mask = F.pad(self.mask, (0, 1), value=1)
        return self.mask

    def keep_rows(self, indices: list[int]) -> None:
        if len(indices) == self.rows:
            return
        if not indices:
            self.cache, self.mask = None, None
            return
        index = torch.tensor(indices, dtype=torch.long)
        for layer in self.cache.layers:
            _fill_layer(layer, layer.keys.index_select(0, index), layer.values.index_select(0, index))
        self.mask = self.mask.index_select(0, index)
        self._drop_shared_padding()

    def _drop_shared_padding(self) -> None:
        leading_padding = int((self.mask.cumsum(dim=1) == 0).sum(dim=1).min())
        if leading_padding == 0:
            return
        for layer in self.cache.layers:
            _fill_layer(layer, layer.keys[:, :, leading_padding:], layer.values[:, :, leading_padding:])
        self.mask = self.mask[:, leading_padding:]


def _plain_layer(layer):
    if type(layer) is not DynamicLayer:
        raise NotImplementedError(
            f"the embedded server batches full-attention caches only, not {type(layer).__name__}"
        )
    return layer


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
        _fill_layer(layer, torch.where(keep, layer.keys, 0.0), torch.where(keep, layer.values, 0.0))
