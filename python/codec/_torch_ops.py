"""PyTorch custom ops (torch.library) over the C++ entry points, with fake
implementations, so that torch.compile(fullgraph=True) traces a decode step
that calls BatchPrefixDecodeWrapper.run or merge_state without a graph break
and torch.library.opcheck passes. Outside compilation the wrappers call the
implementation directly: the dispatcher's round trip is host time a decode
step pays per layer for nothing."""

from typing import Optional, Tuple

import torch

from . import _codec
from .decode import wrapper_for


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _decode_impl(q: torch.Tensor, k: torch.Tensor, v: Optional[torch.Tensor], workspace: torch.Tensor,
                 out: torch.Tensor, lse: Optional[torch.Tensor], handle: int, hnd: bool, lse_base2: bool) -> None:
    wrapper_for(handle)._run(q, k, v, workspace, out, lse, lse_base2, _stream(q))


# The workspace is written too (the partial results), so it is declared mutated.
_decode_op = torch.library.custom_op("codec::batch_prefix_decode", mutates_args=("workspace", "out", "lse"))(
    _decode_impl)


@_decode_op.register_fake
def _(q, k, v, workspace, out, lse, handle, hnd, lse_base2) -> None:
    return None


def decode(q, k, v, workspace, out, lse, handle: int, hnd: bool, lse_base2: bool) -> None:
    if torch.compiler.is_compiling():
        torch.ops.codec.batch_prefix_decode(q, k, v, workspace, out, lse, handle, hnd, lse_base2)
    else:
        _decode_impl(q, k, v, workspace, out, lse, handle, hnd, lse_base2)


def _merge_impl(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor,
                lse_base2: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    v = torch.empty_like(v_a, memory_format=torch.contiguous_format)
    s = torch.empty_like(s_a, memory_format=torch.contiguous_format)
    _codec.merge_state(v_a, s_a, v_b, s_b, v, s, lse_base2, _stream(v_a))
    return v, s


_merge_op = torch.library.custom_op("codec::merge_state", mutates_args=())(_merge_impl)


@_merge_op.register_fake
def _(v_a, s_a, v_b, s_b, lse_base2):
    return (torch.empty_like(v_a, memory_format=torch.contiguous_format),
            torch.empty_like(s_a, memory_format=torch.contiguous_format))


def merge_state(v_a, s_a, v_b, s_b, lse_base2: bool):
    if torch.compiler.is_compiling():
        return torch.ops.codec.merge_state(v_a, s_a, v_b, s_b, lse_base2)
    return _merge_impl(v_a, s_a, v_b, s_b, lse_base2)
