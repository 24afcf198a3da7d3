"""CoDec: decode attention for batches whose requests share prefixes of their
KV cache (documents with many questions, shared system prompts, parallel
sampling, tree search). A conventional decode kernel reads a shared prefix
once per request; CoDec reads it once per batch.

    import codec
    w = codec.BatchPrefixDecodeWrapper(workspace_buffer, kv_layout="NHD")
    w.plan(kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
           q_data_type="bfloat16")
    out = w.run(q, paged_kv_cache)

Tensors come from numpy (CPU engine), torch (CPU or CUDA) or CuPy (CUDA),
through DLPack and the buffer protocol; torch is optional. With torch present
the entry points are also torch.library custom ops (torch.compile-safe).
"""

from . import _codec
from .decode import BatchPrefixDecodeWrapper
from .forest import Forest, KVForest, KVUpdate, PageTables, copy_pages, derive_forest
from .parallel import HeadSlice, tensor_parallel_slice
from .prefill import BatchPrefixPrefillWrapper
from .state import merge_state

__version__ = "0.1.0"

__all__ = [
    "BatchPrefixDecodeWrapper",
    "BatchPrefixPrefillWrapper",
    "Forest",
    "HeadSlice",
    "KVForest",
    "KVUpdate",
    "PageTables",
    "copy_pages",
    "cuda_available",
    "derive_forest",
    "merge_state",
    "tensor_parallel_slice",
]


def cuda_available() -> bool:
    """Whether this build has the CUDA engine and a CUDA device is present."""
    return bool(_codec.has_cuda) and _codec.cuda_device_count() > 0


try:  # register the custom ops when torch is there; everything else works without it
    import torch as _torch  # noqa: F401
except ImportError:
    pass
else:
    from . import _torch_ops  # noqa: F401
