"""``prefetch(array, index)``: a cache hint for compiled kernels (LLVM's ``llvm.prefetch``).

At a million slots the trees are far larger than the caches, so a batch of 32 tree walks is
bound by memory latency.  The addresses each walk will touch are known a step ahead (or, for a
write, all at once), so the kernels ask for those lines early and let the misses overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import llvmlite.binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# The intrinsic's name carries its pointer type: opaque ``ptr`` from LLVM 17 on, ``i8*`` before.
_NAME = "llvm.prefetch.p0" if llvmlite.binding.llvm_version_info[0] >= 17 else "llvm.prefetch.p0i8"


@intrinsic
def _prefetch(typingctx: Any, array: Any, index: Any) -> Any:
    """Ask for the cache line holding ``array[index]`` (read, keep in all cache levels)."""
    signature = types.void(array, index)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array_type = sig.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]], wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        function = cgutils.get_or_insert_function(builder.module, function_type, _NAME)
        builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


prefetch = cast(Callable[[Any, Any], None], _prefetch)
