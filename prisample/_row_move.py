"""``move(array, row, to, start, count)``: one ``memmove`` inside a row of a 2-D array, for
compiled kernels.

A sorted row that takes or gives up an entry shifts the entries after it by one place.  Written
as a loop, numba copies them one by one (it cannot prove the ranges do not overlap); LLVM's
``memmove`` copies them as one block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["move"]


@intrinsic
def _move(typingctx: Any, array: Any, row: Any, to: Any, start: Any, count: Any) -> Any:
    """``array[row, to : to + count] = array[row, start : start + count]`` (overlap allowed);
    ``array`` C-contiguous, indices in range (not checked)."""
    if not (isinstance(array, types.Array) and array.ndim == 2 and array.layout == "C"):
        return None
    signature = types.void(array, row, to, start, count)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array_type = sig.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        row_i, to_i, start_i, count_i = (
            context.cast(builder, value, kind, types.intp)
            for value, kind in zip(args[1:], sig.args[1:], strict=True)
        )

        def pointer(column: Any) -> Any:
            indices = [row_i, column]
            return cgutils.get_item_pointer(context, builder, array_type, view, indices, wraparound=False)

        destination, source = pointer(to_i), pointer(start_i)
        itemsize = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
        positive = builder.icmp_signed(">", count_i, ir.Constant(intp, 0))
        with builder.if_then(positive):
            cgutils.raw_memmove(builder, destination, source, count_i, itemsize)
        return context.get_dummy_value()

    return signature, codegen


move = cast(Callable[[Any, Any, Any, Any, Any], None], _move)
