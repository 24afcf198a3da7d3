"""Framework-neutral tensor helpers: which framework and device a tensor lives
on, the stream work on it should use, dtype names, host copies of index
arrays, and allocation of outputs like a given tensor. torch and CuPy are
imported only if a tensor of theirs shows up."""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

import numpy as np

_DTYPE_NAMES = {
    "float16": "float16", "half": "float16", "fp16": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "float": "float32", "fp32": "float32", "f32": "float32",
    # KV caches only (numpy callers pass their bits as uint8)
    "float8_e4m3fn": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2",
}
FP8 = ("float8_e4m3fn", "float8_e5m2")


def framework(x: Any) -> str:
    """'torch', 'numpy', 'cupy', or another module's name (DLPack producers)."""
    return type(x).__module__.split(".")[0]


def is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def device_of(x: Any) -> Tuple[str, int]:
    """('cpu', 0) or ('cuda', index) for a tensor of any framework."""
    if is_torch(x):
        return ("cuda", x.device.index or 0) if x.device.type == "cuda" else ("cpu", 0)
    if isinstance(x, np.ndarray):
        return ("cpu", 0)
    if framework(x) == "cupy":
        return ("cuda", x.device.id)
    if hasattr(x, "__dlpack_device__"):
        kind, index = x.__dlpack_device__()
        if int(kind) == 2:
            return ("cuda", int(index))
        if int(kind) in (1, 3):
            return ("cpu", 0)
        raise ValueError(f"tensors must be on the CPU or a CUDA device, not DLPack device type {int(kind)}")
    return ("cpu", 0)  # anything numpy can read


def current_stream(x: Any) -> int:
    """The stream the caller's framework currently runs on for x's device (0: legacy default)."""
    kind, index = device_of(x)
    if kind != "cuda":
        return 0
    if is_torch(x):
        import torch
        return torch.cuda.current_stream(index).cuda_stream
    if framework(x) == "cupy":
        import cupy
        with cupy.cuda.Device(index):
            return cupy.cuda.get_current_stream().ptr
    return 0


def dtype_name(dtype: Any, argument: str) -> str:
    """'float16', 'bfloat16', 'float32' (or for a KV cache 'float8_e4m3fn', 'float8_e5m2') from a torch
    dtype, numpy dtype or string."""
    if dtype is None:
        raise TypeError(f"{argument} must be a dtype, not None")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype).replace("torch.", "")
    elif isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name.lower() not in _DTYPE_NAMES:
        raise TypeError(f"{argument} {dtype!r} is not a dtype CoDec takes (float16, bfloat16, float32; "
                        "float8_e4m3fn, float8_e5m2 for a KV cache)")
    return _DTYPE_NAMES[name.lower()]


def host_array(x: Any) -> np.ndarray:
    """x's values as a numpy array; device tensors are copied once."""
    if is_torch(x):
        x = x.detach().to("cpu").numpy()
    elif framework(x) == "cupy":
        import cupy
        x = cupy.asnumpy(x)
    return np.asarray(x)


def host_int32(x: Any, argument: str) -> np.ndarray:
    """A 1-D int32 numpy array with x's values; device tensors are copied once."""
    if is_torch(x) and (x.is_floating_point() or x.is_complex()):
        raise TypeError(f"{argument} has dtype {x.dtype}; expected an integer tensor (int32)")
    a = host_array(x)
    if a.ndim != 1:
        raise ValueError(f"{argument} has shape {a.shape}; expected a 1-D array")
    if a.dtype != np.int32:
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"{argument} has dtype {a.dtype}; expected an integer array (int32)")
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise ValueError(f"{argument} holds values outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def empty_like_rows(x: Any, shape: Tuple[int, ...], dtype: Any = None) -> Any:
    """A new tensor of `shape` in x's framework and device; dtype None: x's, else 'float32'."""
    if is_torch(x):
        import torch
        return torch.empty(shape, dtype=x.dtype if dtype is None else torch.float32, device=x.device)
    if isinstance(x, np.ndarray):
        return np.empty(shape, dtype=x.dtype if dtype is None else np.float32)
    if framework(x) == "cupy":
        import cupy
        with cupy.cuda.Device(x.device.id):
            return cupy.empty(shape, dtype=x.dtype if dtype is None else cupy.float32)
    raise TypeError(f"cannot allocate an output like a {type(x).__name__}: pass out= (and lse=) explicitly")


def nbytes(x: Any) -> int:
    if is_torch(x):
        return x.numel() * x.element_size()
    return int(x.nbytes)


def host_scale(x: Any, name: str) -> Optional[np.ndarray]:
    """A KV cache's scale (k_scale, v_scale) as a host float32 array: None, a
    float, or a 0-d or 1-D array or tensor (copied from a device once)."""
    if x is None:
        return None
    a = np.ascontiguousarray(host_array(x) if not isinstance(x, (int, float)) else np.array(x), dtype=np.float32)
    if a.ndim > 1:
        raise ValueError(f"{name} has shape {a.shape}; expected a scalar or (num_kv_heads,)")
    return a
