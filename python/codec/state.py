"""merge_state: the merge of two partial attention states (the partial-state
contract of the library: o normalised, lse the log-sum-exp of the scores)."""

from __future__ import annotations

from typing import Any, Tuple, Union

from . import _codec
from ._tensors import current_stream, empty_like_rows, is_torch
from ._paged import lse_base2


def merge_state(v_a: Any, s_a: Any, v_b: Any, s_b: Any, lse_base: Union[str, float] = "e") -> Tuple[Any, Any]:
    """Merges two partial results of the same query rows over disjoint key sets.

    Args:
        v_a, v_b: (batch, num_heads, head_dim) attention outputs, normalised,
            in one dtype (float16, bfloat16, float32), on one device.
        s_a, s_b: (batch, num_heads) float32 log-sum-exp of each side's scores,
            in base ``lse_base``: "e" (default, as this library's run and vLLM's
            merge_attn_states) or 2 (FlashInfer's merge_state and wrappers).

    Returns:
        (v, s): the attention over both key sets, v in v_a's dtype, s float32
        in the same base. A side with s = -inf is empty: the result is the
        other side; both empty give v = 0, s = -inf, never NaN.
    """
    base2 = lse_base2(lse_base)
    if is_torch(v_a):
        from . import _torch_ops
        return _torch_ops.merge_state(v_a, s_a, v_b, s_b, base2)
    v = empty_like_rows(v_a, tuple(v_a.shape))
    s = empty_like_rows(v_a, tuple(s_a.shape), "float32")
    _codec.merge_state(v_a, s_a, v_b, s_b, v, s, base2, current_stream(v_a))
    return v, s
