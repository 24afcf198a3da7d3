"""Plan slots: what ``BatchPrefixDecodeWrapper`` hands the torch custom op
``codec::batch_prefix_decode`` in place of itself.

A custom op takes tensors and plain values, and under torch.compile a plain
value is a constant of the compiled graph; yet a compiled decode step must
run whatever batch was planned last. So a wrapper owns a ``PlanSlot``, which
holds what a run needs besides its tensors (the current plan, the CPU
engine's thread count), and passes the op the slot's ``handle``, an int.
``plan`` writes the slot; the op looks it up by handle at each run
(``slot_for``) and calls ``run_fields``. This module imports neither side:
the wrapper (decode.py) and the ops (_torch_ops.py) meet here."""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Optional

from . import _codec

_SLOTS: "weakref.WeakValueDictionary[int, PlanSlot]" = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


class PlanSlot:
    """The plan a wrapper's ``run`` executes, found by ``handle`` while the
    wrapper (which holds the slot) lives.

    Attributes:
        handle: the int the custom op takes.
        plan: the current ``_codec.Plan`` (None before the first plan).
        num_threads: CPU engine threads (0: OpenMP's default).
    """

    __slots__ = ("handle", "plan", "num_threads", "__weakref__")

    def __init__(self, num_threads: int) -> None:
        self.handle = next(_HANDLES)
        self.plan: Optional[Any] = None
        self.num_threads = int(num_threads)
        _SLOTS[self.handle] = self

    def run(self, q: Any, k: Any, v: Any, hnd: bool, out: Any, lse: Any, workspace: Any, lse_base2: bool,
            stream: int, k_scale: Any = None, v_scale: Any = None, sinks: Any = None) -> None:
        """The plan over tensors of any framework (DLPack, the buffer protocol)."""
        _codec.run(self.plan, q, k, v, hnd, out, lse, workspace, lse_base2, stream, self.num_threads, k_scale, v_scale,
                   sinks)

    def run_fields(self, q: Any, k: Any, v: Any, hnd: bool, out: Any, lse: Any, workspace: Any, lse_base2: bool,
                   stream: int, k_scale: Any = None, v_scale: Any = None, sinks: Any = None) -> None:
        """The plan over tensors given as (data_ptr, dlpack code, bits, shape,
        strides, device index) tuples, or None: what a torch tensor costs
        least host time to describe."""
        _codec.run_fields(self.plan, q, k, v, hnd, out, lse, workspace, lse_base2, stream, self.num_threads, k_scale,
                          v_scale, sinks)


def slot_for(handle: int) -> PlanSlot:
    """The live slot of a handle; RuntimeError once its wrapper is gone."""
    slot = _SLOTS.get(handle)
    if slot is None:
        raise RuntimeError(f"no live BatchPrefixDecodeWrapper has handle {handle}")
    return slot
