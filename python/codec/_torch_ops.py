"""PyTorch custom ops (torch.library) over the C++ entry points, with fake
implementations, so that torch.compile(fullgraph=True) traces a decode step
that calls BatchPrefixDecodeWrapper.run or merge_state without a graph break
and torch.library.opcheck passes. Outside compilation the wrappers call the
implementation directly: the dispatcher's round trip is host time a decode
step pays per layer for nothing.

The decode op takes an int handle where the wrapper would be (a plain value,
constant under torch.compile) and runs the plan of the PlanSlot it names
(_plan_slots.py): this module knows nothing of the wrapper."""

from typing import Optional, Tuple

import torch

from . import _codec
from ._plan_slots import slot_for


# The raw current stream, as torch's own generated code reads it:
# torch.cuda.current_stream() builds a Stream object per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(t: torch.Tensor) -> int:
    if not t.is_cuda:
        return 0
    if _raw_stream is not None:
        return _raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


# DLPack (code, bits) of the dtypes a tensor may have here; others are refused by name.
_DLPACK = {torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.float32: (2, 32), torch.float64: (2, 64),
           torch.uint8: (1, 8), torch.int8: (0, 8), torch.int16: (0, 16), torch.uint16: (1, 16),
           torch.int32: (0, 32), torch.int64: (0, 64),
           torch.float8_e4m3fn: (10, 8), torch.float8_e5m2: (12, 8)}  # DLPack 1.1's float8 codes


def _fields(t: Optional[torch.Tensor]):
    """What codec._codec.run_fields reads of a tensor: torch's __dlpack__, a
    Python method, costs microseconds per tensor on a path run per layer."""
    if t is None:
        return None
    code, bits = _DLPACK.get(t.dtype, (255, 0))
    return (t.data_ptr(), code, bits, t.shape, t.stride(), t.get_device())


def scale(x, name: str, device: torch.device) -> Optional[torch.Tensor]:
    """A KV cache's scale (k_scale, v_scale) or the sinks as a float32
    tensor on the engine's device: None, a float (on a GPU filled in the
    stream, which a CUDA graph captures), or a 0-d or 1-D tensor."""
    if x is None:
        return None
    t = x if isinstance(x, torch.Tensor) else torch.full((), float(x), dtype=torch.float32, device=device)
    if t.dim() > 1:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected a scalar or (num_kv_heads,)")
    return t.to(device=device, dtype=torch.float32).contiguous()


def _decode_impl(q: torch.Tensor, k: torch.Tensor, v: Optional[torch.Tensor], workspace: torch.Tensor,
                 out: torch.Tensor, lse: Optional[torch.Tensor], handle: int, hnd: bool, lse_base2: bool,
                 k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                 sinks: Optional[torch.Tensor] = None) -> None:
    slot_for(handle).run_fields(_fields(q), _fields(k), _fields(v), hnd, _fields(out), _fields(lse), _fields(workspace),
                                lse_base2, _stream(q), _fields(k_scale), _fields(v_scale), _fields(sinks))


# The workspace is written too (the partial results), so it is declared mutated.
_decode_op = torch.library.custom_op("codec::batch_prefix_decode", mutates_args=("workspace", "out", "lse"))(
    _decode_impl)


@_decode_op.register_fake
def _(q, k, v, workspace, out, lse, handle, hnd, lse_base2, k_scale=None, v_scale=None, sinks=None) -> None:
    return None


def decode(q, k, v, workspace, out, lse, handle: int, hnd: bool, lse_base2: bool, k_scale=None, v_scale=None,
           sinks=None) -> None:
    if torch.compiler.is_compiling():
        torch.ops.codec.batch_prefix_decode(q, k, v, workspace, out, lse, handle, hnd, lse_base2, k_scale, v_scale,
                                            sinks)
    else:
        _decode_impl(q, k, v, workspace, out, lse, handle, hnd, lse_base2, k_scale, v_scale, sinks)


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
