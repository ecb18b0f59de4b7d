"""Calls from numba-compiled code to C functions given by their addresses (plain integers).

The compiled integrator and the matched-loss kernel call the generated kernels, the stage combinations and
SciPy's special functions through their addresses: an address is an argument, so one compiled (and cached)
caller serves every form, and no callee is linked into it and optimised again with it. Each intrinsic
emits the call with the C signature its name states.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def call(typingctx, address, args):
    """Call the C function at ``address`` as void(...) on the tuple ``args``: an array passed as the
    pointer to its data (contiguous), an integer as int64."""
    def codegen(context, builder, signature, llargs):
        values = []
        for i, kind in enumerate(signature.args[1]):
            value = builder.extract_value(llargs[1], i)
            values.append(context.make_array(kind)(context, builder, value).data if isinstance(kind, types.Array)
                          else context.cast(builder, value, kind, types.int64))
        function = ir.FunctionType(ir.VoidType(), [value.type for value in values])
        builder.call(builder.inttoptr(llargs[0], function.as_pointer()), values)
        return context.get_dummy_value()
    return types.void(address, args), codegen


@intrinsic
def call_scalar(typingctx, address, x, p):
    """Call the C kernel at ``address`` as double(double *x, double *p)."""
    def codegen(context, builder, signature, args):
        pointers = [context.make_array(t)(context, builder, v).data for t, v in zip(signature.args[1:], args[1:], strict=True)]
        double = ir.DoubleType().as_pointer()
        kernel = builder.inttoptr(args[0], ir.FunctionType(ir.DoubleType(), [double] * 2).as_pointer())
        return builder.call(kernel, pointers)
    return types.float64(address, x, p), codegen


@intrinsic
def call_unary(typingctx, address, x):
    """Call the C function at ``address`` as double(double)."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        function = builder.inttoptr(args[0], ir.FunctionType(double, [double]).as_pointer())
        return builder.call(function, [args[1]])
    return types.float64(address, x), codegen
