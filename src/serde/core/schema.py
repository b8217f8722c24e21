"""msgspec Structs mirroring ``schema.thrift`` one-to-one.

Each field is ``Annotated[type, Id(n)]`` with its thrift id. Unions subclass :class:`Union`:
all members optional, exactly one set, written as a single-key JSON object.
Doubles are :data:`F64`: a float, or one of the strings "nan", "inf", "-inf".
"""

import enum
import math
from itertools import compress
from operator import is_not
from typing import Annotated, Literal, Optional

import msgspec

__all__ = [
    "F64", "Id", "Struct", "Union", "to_f64", "from_f64", "tensor_ref",
    "ScalarType", "Layout", "MemoryFormat", "ArgumentKind",
    "Device", "SymExprHint", "ExprConstant", "Rational", "OpaqueUnary", "Expr", "SymExpr", "SymInt", "SymFloat", "SymBool", "TensorMeta",
    "SymIntArgument", "SymFloatArgument", "SymBoolArgument", "TensorArgument", "TokenArgument",
    "OptionalTensorArgument", "GraphArgument", "CustomObjArgument", "ComplexValue", "Argument",
    "NamedArgument", "ModuleStackEntry", "SourceFn", "NodeMetadata", "Node", "Graph",
    "UserInputSpec", "ConstantValue", "InputToConstantInputSpec", "InputToParameterSpec",
    "InputToBufferSpec", "InputToTensorConstantSpec", "InputToCustomObjSpec", "InputTokenSpec",
    "InputSpec", "UserOutputSpec", "LossOutputSpec", "BufferMutationSpec",
    "ParameterMutationSpec", "GradientToParameterSpec", "GradientToUserInputSpec",
    "UserInputMutationSpec", "OutputTokenSpec", "OutputSpec", "GraphSignature", "TreeSpec",
    "ModuleCallSignature", "ModuleCallEntry", "GraphModule", "SchemaVersion", "RangeConstraint",
    "GuardProperty", "GuardKey", "GuardSource", "InputGuards", "ExportedProgram", "Storage", "ExternalTensor",
    "WeightsFile", "StoredTensor",
    "TensorSubclass", "ContextValue", "ContextItem", "ExampleLeaf", "ExampleInputs", "Weights",
    "NodeDebug", "DebugInfo", "Member", "Manifest",
]


class Id:
    """Thrift field id, carried in ``Annotated`` metadata."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Id({self.value})"


# Every integer of the schema that torch holds as an int64 (sizes, strides, offsets, arguments,
# ranges, hints, byte counts, versions) is bounded in the decoder: a bigger one is refused at the
# boundary, naming its field, for every member and every path that reads one (load, mmap load,
# emit, show); unbounded, it failed later as an OverflowError inside torch or msgpack. Expression
# literals (Expr.integer, Rational) are sympy integers, bounded by Limits.max_int_bits where an
# expression is built, and by int64 where the native emitter compiles one.
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


# JSON has no nan/inf; those travel as strings. -0.0 and all finite floats are plain numbers.
F64 = float | Literal["nan", "inf", "-inf"]


def to_f64(x: float) -> F64:
    """Wire form of a float (exact for every IEEE double, including nan/inf/-0.0)."""
    if math.isfinite(x):
        return float(x)
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def from_f64(v: F64) -> float:
    """Inverse of :func:`to_f64`."""
    return float(v)


class Struct(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """Base of every schema struct. Unknown fields are ignored on decode (forward compat)."""


# As many Nones as any union has members (map() stops at the shorter input).
_NONES = (None,) * 256


class Union(Struct, kw_only=True):
    """Base of every schema union: all members optional, exactly one set."""

    def __post_init__(self) -> None:
        values = msgspec.structs.astuple(self)  # one C call instead of a getattr per member
        if len(values) - values.count(None) != 1:
            set_ = [f for f, v in zip(self.__struct_fields__, values, strict=True) if v is not None]
            raise ValueError(
                f"{type(self).__name__} must set exactly one of {list(self.__struct_fields__)}, "
                f"got {set_ or 'none'}"
            )

    @property
    def kind(self) -> str:
        """Name of the member that is set."""
        # All in C (no Python-level loop over the members): it is asked for on every walk step.
        return next(compress(self.__struct_fields__, map(is_not, msgspec.structs.astuple(self), _NONES)))

    @property
    def value(self):
        return getattr(self, self.kind)


# ---------------------------------------------------------------- enums


class ScalarType(enum.IntEnum):
    UNKNOWN = 0
    BYTE = 1
    CHAR = 2
    SHORT = 3
    INT = 4
    LONG = 5
    HALF = 6
    FLOAT = 7
    DOUBLE = 8
    COMPLEXHALF = 9
    COMPLEXFLOAT = 10
    COMPLEXDOUBLE = 11
    BOOL = 12
    BFLOAT16 = 13
    UINT16 = 28
    FLOAT8E4M3FN = 29
    FLOAT8E5M2 = 30
    FLOAT8E4M3FNUZ = 31
    FLOAT8E5M2FNUZ = 32
    FLOAT8E8M0FNU = 33
    UINT32 = 34
    UINT64 = 35


class Layout(enum.IntEnum):
    Unknown = 0
    SparseCoo = 1
    SparseCsr = 2
    SparseCsc = 3
    SparseBsr = 4
    SparseBsc = 5
    _mkldnn = 6
    Strided = 7


class MemoryFormat(enum.IntEnum):
    Unknown = 0
    ContiguousFormat = 1
    ChannelsLast = 2
    ChannelsLast3d = 3
    PreserveFormat = 4


class ArgumentKind(enum.IntEnum):
    UNKNOWN = 0
    POSITIONAL = 1
    KEYWORD = 2


# ---------------------------------------------------------------- values


class Device(Struct, kw_only=True):
    type: Annotated[str, Id(10)]
    index: Annotated[Optional[I64], Id(20)] = None


class SymExprHint(Union, kw_only=True):
    as_int: Annotated[Optional[I64], Id(10)] = None
    as_bool: Annotated[Optional[bool], Id(20)] = None
    as_float: Annotated[Optional[F64], Id(30)] = None


class ExprConstant(enum.IntEnum):
    TRUE = 1
    FALSE = 2
    INFINITY = 3
    NEG_INFINITY = 4
    INT_INFINITY = 5
    NEG_INT_INFINITY = 6
    NAN = 7
    COMPLEX_INFINITY = 8


class Rational(Struct, kw_only=True):
    p: Annotated[int, Id(10)]  # expression literals: bounded by Limits.max_int_bits where built
    q: Annotated[int, Id(20)]


class OpaqueUnary(Struct, kw_only=True):
    fn: Annotated[str, Id(10)]
    arg: Annotated["Expr", Id(20)]


class Expr(Union, kw_only=True):
    symbol: Annotated[Optional[str], Id(10)] = None
    integer: Annotated[Optional[int], Id(20)] = None  # bounded by Limits.max_int_bits where built
    floating: Annotated[Optional[F64], Id(30)] = None
    rational: Annotated[Optional[Rational], Id(40)] = None
    constant: Annotated[Optional[ExprConstant], Id(50)] = None
    opaque_unary: Annotated[Optional[OpaqueUnary], Id(60)] = None
    add: Annotated[Optional[list["Expr"]], Id(100)] = None
    mul: Annotated[Optional[list["Expr"]], Id(101)] = None
    pow: Annotated[Optional[list["Expr"]], Id(102)] = None
    eq: Annotated[Optional[list["Expr"]], Id(110)] = None
    ne: Annotated[Optional[list["Expr"]], Id(111)] = None
    lt: Annotated[Optional[list["Expr"]], Id(112)] = None
    le: Annotated[Optional[list["Expr"]], Id(113)] = None
    gt: Annotated[Optional[list["Expr"]], Id(114)] = None
    ge: Annotated[Optional[list["Expr"]], Id(115)] = None
    logical_and: Annotated[Optional[list["Expr"]], Id(120)] = None
    logical_or: Annotated[Optional[list["Expr"]], Id(121)] = None
    logical_not: Annotated[Optional[list["Expr"]], Id(122)] = None
    ite: Annotated[Optional[list["Expr"]], Id(123)] = None
    piecewise: Annotated[Optional[list["Expr"]], Id(124)] = None
    abs: Annotated[Optional[list["Expr"]], Id(130)] = None
    floor: Annotated[Optional[list["Expr"]], Id(131)] = None
    ceiling: Annotated[Optional[list["Expr"]], Id(132)] = None
    floor_div: Annotated[Optional[list["Expr"]], Id(200)] = None
    mod: Annotated[Optional[list["Expr"]], Id(201)] = None
    python_mod: Annotated[Optional[list["Expr"]], Id(202)] = None
    clean_div: Annotated[Optional[list["Expr"]], Id(203)] = None
    ceil_div: Annotated[Optional[list["Expr"]], Id(204)] = None
    modular_indexing: Annotated[Optional[list["Expr"]], Id(205)] = None
    where: Annotated[Optional[list["Expr"]], Id(206)] = None
    ceil_to_int: Annotated[Optional[list["Expr"]], Id(207)] = None
    floor_to_int: Annotated[Optional[list["Expr"]], Id(208)] = None
    trunc_to_int: Annotated[Optional[list["Expr"]], Id(209)] = None
    trunc_to_float: Annotated[Optional[list["Expr"]], Id(210)] = None
    round_to_int: Annotated[Optional[list["Expr"]], Id(211)] = None
    round_decimal: Annotated[Optional[list["Expr"]], Id(212)] = None
    to_float: Annotated[Optional[list["Expr"]], Id(213)] = None
    int_true_div: Annotated[Optional[list["Expr"]], Id(214)] = None
    float_true_div: Annotated[Optional[list["Expr"]], Id(215)] = None
    pow_by_natural: Annotated[Optional[list["Expr"]], Id(216)] = None
    float_pow: Annotated[Optional[list["Expr"]], Id(217)] = None
    lshift: Annotated[Optional[list["Expr"]], Id(218)] = None
    rshift: Annotated[Optional[list["Expr"]], Id(219)] = None
    identity: Annotated[Optional[list["Expr"]], Id(220)] = None
    max: Annotated[Optional[list["Expr"]], Id(221)] = None
    min: Annotated[Optional[list["Expr"]], Id(222)] = None
    is_non_overlapping_and_dense: Annotated[Optional[list["Expr"]], Id(223)] = None
    bitwise_and: Annotated[Optional[list["Expr"]], Id(224)] = None
    bitwise_or: Annotated[Optional[list["Expr"]], Id(225)] = None
    bitwise_xor: Annotated[Optional[list["Expr"]], Id(226)] = None


class SymExpr(Struct, kw_only=True):
    hint: Annotated[Optional[SymExprHint], Id(20)] = None
    expr: Annotated[Expr, Id(30)]


class SymInt(Union, kw_only=True):
    as_expr: Annotated[Optional[SymExpr], Id(10)] = None
    as_int: Annotated[Optional[I64], Id(20)] = None


class SymFloat(Union, kw_only=True):
    as_expr: Annotated[Optional[SymExpr], Id(10)] = None
    as_float: Annotated[Optional[F64], Id(20)] = None


class SymBool(Union, kw_only=True):
    as_expr: Annotated[Optional[SymExpr], Id(10)] = None
    as_bool: Annotated[Optional[bool], Id(20)] = None


class TensorMeta(Struct, kw_only=True):
    dtype: Annotated[ScalarType, Id(10)]
    sizes: Annotated[list[SymInt], Id(20)]
    requires_grad: Annotated[bool, Id(30)]
    device: Annotated[Device, Id(40)]
    strides: Annotated[list[SymInt], Id(50)]
    storage_offset: Annotated[SymInt, Id(60)]
    layout: Annotated[Layout, Id(70)]


class SymIntArgument(Union, kw_only=True):
    as_name: Annotated[Optional[str], Id(10)] = None
    as_int: Annotated[Optional[I64], Id(20)] = None


class SymFloatArgument(Union, kw_only=True):
    as_name: Annotated[Optional[str], Id(10)] = None
    as_float: Annotated[Optional[F64], Id(20)] = None


class SymBoolArgument(Union, kw_only=True):
    as_name: Annotated[Optional[str], Id(10)] = None
    as_bool: Annotated[Optional[bool], Id(20)] = None


class TensorArgument(Struct, kw_only=True):
    name: Annotated[str, Id(10)]


class TokenArgument(Struct, kw_only=True):
    name: Annotated[str, Id(10)]


class OptionalTensorArgument(Union, kw_only=True):
    as_none: Annotated[Optional[bool], Id(10)] = None
    as_tensor: Annotated[Optional[TensorArgument], Id(20)] = None


class GraphArgument(Struct, kw_only=True):
    name: Annotated[str, Id(10)]
    graph: Annotated["Graph", Id(20)]


class CustomObjArgument(Struct, kw_only=True):
    name: Annotated[str, Id(10)]
    class_fqn: Annotated[str, Id(20)]


class ComplexValue(Struct, kw_only=True):
    real: Annotated[F64, Id(10)]
    imag: Annotated[F64, Id(20)]


class Argument(Union, kw_only=True):
    as_none: Annotated[Optional[bool], Id(10)] = None
    as_tensor: Annotated[Optional[TensorArgument], Id(20)] = None
    as_tensors: Annotated[Optional[list[TensorArgument]], Id(30)] = None
    as_int: Annotated[Optional[I64], Id(50)] = None
    as_ints: Annotated[Optional[list[I64]], Id(70)] = None
    as_float: Annotated[Optional[F64], Id(80)] = None
    as_floats: Annotated[Optional[list[F64]], Id(90)] = None
    as_string: Annotated[Optional[str], Id(100)] = None
    as_strings: Annotated[Optional[list[str]], Id(101)] = None
    as_sym_int: Annotated[Optional[SymIntArgument], Id(110)] = None
    as_sym_ints: Annotated[Optional[list[SymIntArgument]], Id(120)] = None
    as_scalar_type: Annotated[Optional[ScalarType], Id(130)] = None
    as_memory_format: Annotated[Optional[MemoryFormat], Id(140)] = None
    as_layout: Annotated[Optional[Layout], Id(150)] = None
    as_device: Annotated[Optional[Device], Id(160)] = None
    as_bool: Annotated[Optional[bool], Id(170)] = None
    as_bools: Annotated[Optional[list[bool]], Id(180)] = None
    as_sym_bool: Annotated[Optional[SymBoolArgument], Id(182)] = None
    as_sym_bools: Annotated[Optional[list[SymBoolArgument]], Id(184)] = None
    as_optional_tensors: Annotated[Optional[list[OptionalTensorArgument]], Id(190)] = None
    as_graph: Annotated[Optional[GraphArgument], Id(200)] = None
    as_custom_obj: Annotated[Optional[CustomObjArgument], Id(210)] = None
    as_operator: Annotated[Optional[str], Id(220)] = None
    as_sym_float: Annotated[Optional[SymFloatArgument], Id(230)] = None
    as_sym_floats: Annotated[Optional[list[SymFloatArgument]], Id(240)] = None
    as_optional_tensor: Annotated[Optional[OptionalTensorArgument], Id(250)] = None
    as_complex: Annotated[Optional[ComplexValue], Id(260)] = None
    as_nested_tensors: Annotated[Optional[list[list[TensorArgument]]], Id(270)] = None
    as_int_lists: Annotated[Optional[list[list[I64]]], Id(280)] = None
    as_string_to_argument: Annotated[Optional[dict[str, "Argument"]], Id(290)] = None
    as_float_lists: Annotated[Optional[list[list[F64]]], Id(300)] = None
    as_tuple: Annotated[Optional[list["Argument"]], Id(310)] = None


# A checked reference to copy: copying it and setting its one member skips the union's
# Python-level check, which costs most of building an Argument (save builds one per value, twice).
_TENSOR_REF = Argument(as_tensor=TensorArgument(name="_"))
_copy_tensor_ref = _TENSOR_REF.__copy__


def tensor_ref(name: str) -> Argument:
    """``Argument(as_tensor=TensorArgument(name=name))``: exactly one member set, by construction."""
    a = _copy_tensor_ref()
    msgspec.structs.force_setattr(a, "as_tensor", TensorArgument(name=name))
    return a


class NamedArgument(Struct, kw_only=True):
    name: Annotated[str, Id(10)]
    arg: Annotated[Argument, Id(20)]
    kind: Annotated[Optional[ArgumentKind], Id(30)] = None


class ModuleStackEntry(Struct, kw_only=True):
    key: Annotated[str, Id(10)]
    path: Annotated[str, Id(20)]
    type_name: Annotated[Optional[str], Id(30)] = None


class SourceFn(Struct, kw_only=True):
    name: Annotated[str, Id(10)]
    target: Annotated[str, Id(20)]


class NodeMetadata(Struct, kw_only=True):
    stack_trace: Annotated[Optional[str], Id(10)] = None
    nn_module_stack: Annotated[Optional[list[ModuleStackEntry]], Id(20)] = None
    source_fn_stack: Annotated[Optional[list[SourceFn]], Id(30)] = None
    torch_fn: Annotated[Optional[SourceFn], Id(40)] = None
    custom: Annotated[Optional[str], Id(50)] = None
    from_node: Annotated[Optional[str], Id(60)] = None


class Node(Struct, kw_only=True):
    target: Annotated[str, Id(10)]
    inputs: Annotated[list[NamedArgument], Id(20)]
    outputs: Annotated[list[Argument], Id(30)]
    metadata: Annotated[NodeMetadata, Id(40)]
    is_hop_single_tensor_return: Annotated[Optional[bool], Id(50)] = None
    name: Annotated[str, Id(60)]


class Graph(Struct, kw_only=True):
    inputs: Annotated[list[Argument], Id(10)]
    outputs: Annotated[list[Argument], Id(20)]
    nodes: Annotated[list[Node], Id(30)]
    tensor_values: Annotated[dict[str, TensorMeta], Id(40)]
    sym_int_values: Annotated[dict[str, SymInt], Id(50)]
    sym_bool_values: Annotated[dict[str, SymBool], Id(60)]
    is_single_tensor_return: Annotated[bool, Id(70)]
    custom_obj_values: Annotated[dict[str, CustomObjArgument], Id(80)]
    sym_float_values: Annotated[dict[str, SymFloat], Id(90)]


# ---------------------------------------------------------------- signature


class UserInputSpec(Struct, kw_only=True):
    arg: Annotated[Argument, Id(10)]


class ConstantValue(Union, kw_only=True):
    as_none: Annotated[Optional[bool], Id(10)] = None
    as_int: Annotated[Optional[I64], Id(20)] = None
    as_float: Annotated[Optional[F64], Id(30)] = None
    as_string: Annotated[Optional[str], Id(40)] = None
    as_bool: Annotated[Optional[bool], Id(50)] = None


class InputToConstantInputSpec(Struct, kw_only=True):
    name: Annotated[str, Id(10)]
    value: Annotated[ConstantValue, Id(20)]


class InputToParameterSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    parameter_name: Annotated[str, Id(20)]


class InputToBufferSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    buffer_name: Annotated[str, Id(20)]
    persistent: Annotated[bool, Id(30)]


class InputToTensorConstantSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    tensor_constant_name: Annotated[str, Id(20)]


class InputToCustomObjSpec(Struct, kw_only=True):
    arg: Annotated[CustomObjArgument, Id(10)]
    custom_obj_name: Annotated[str, Id(20)]


class InputTokenSpec(Struct, kw_only=True):
    arg: Annotated[TokenArgument, Id(10)]


class InputSpec(Union, kw_only=True):
    user_input: Annotated[Optional[UserInputSpec], Id(10)] = None
    parameter: Annotated[Optional[InputToParameterSpec], Id(20)] = None
    buffer: Annotated[Optional[InputToBufferSpec], Id(30)] = None
    tensor_constant: Annotated[Optional[InputToTensorConstantSpec], Id(40)] = None
    custom_obj: Annotated[Optional[InputToCustomObjSpec], Id(50)] = None
    constant_input: Annotated[Optional[InputToConstantInputSpec], Id(60)] = None
    token: Annotated[Optional[InputTokenSpec], Id(70)] = None


class UserOutputSpec(Struct, kw_only=True):
    arg: Annotated[Argument, Id(10)]


class LossOutputSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]


class BufferMutationSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    buffer_name: Annotated[str, Id(20)]


class ParameterMutationSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    parameter_name: Annotated[str, Id(20)]


class GradientToParameterSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    parameter_name: Annotated[str, Id(20)]


class GradientToUserInputSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    user_input_name: Annotated[str, Id(20)]


class UserInputMutationSpec(Struct, kw_only=True):
    arg: Annotated[TensorArgument, Id(10)]
    user_input_name: Annotated[str, Id(20)]


class OutputTokenSpec(Struct, kw_only=True):
    arg: Annotated[TokenArgument, Id(10)]


class OutputSpec(Union, kw_only=True):
    user_output: Annotated[Optional[UserOutputSpec], Id(10)] = None
    loss_output: Annotated[Optional[LossOutputSpec], Id(20)] = None
    buffer_mutation: Annotated[Optional[BufferMutationSpec], Id(30)] = None
    gradient_to_parameter: Annotated[Optional[GradientToParameterSpec], Id(40)] = None
    gradient_to_user_input: Annotated[Optional[GradientToUserInputSpec], Id(50)] = None
    user_input_mutation: Annotated[Optional[UserInputMutationSpec], Id(60)] = None
    token: Annotated[Optional[OutputTokenSpec], Id(70)] = None
    parameter_mutation: Annotated[Optional[ParameterMutationSpec], Id(80)] = None


class GraphSignature(Struct, kw_only=True):
    input_specs: Annotated[list[InputSpec], Id(10)]
    output_specs: Annotated[list[OutputSpec], Id(20)]


# ---------------------------------------------------------------- module structure


class TreeSpec(Struct, kw_only=True):
    type: Annotated[str, Id(10)]
    context: Annotated[Optional[str], Id(20)] = None
    children: Annotated[list["TreeSpec"], Id(30)] = []


class ModuleCallSignature(Struct, kw_only=True):
    inputs: Annotated[list[Argument], Id(10)]
    outputs: Annotated[list[Argument], Id(20)]
    in_spec: Annotated[TreeSpec, Id(30)]
    out_spec: Annotated[TreeSpec, Id(40)]
    forward_arg_names: Annotated[Optional[list[str]], Id(50)] = None


class ModuleCallEntry(Struct, kw_only=True):
    fqn: Annotated[str, Id(10)]
    signature: Annotated[Optional[ModuleCallSignature], Id(30)] = None


class GraphModule(Struct, kw_only=True):
    graph: Annotated[Graph, Id(10)]
    custom: Annotated[Optional[str], Id(40)] = None
    signature: Annotated[GraphSignature, Id(50)]
    module_call_graph: Annotated[list[ModuleCallEntry], Id(60)]


class SchemaVersion(Struct, kw_only=True):
    major: Annotated[I64, Id(10)]
    minor: Annotated[I64, Id(20)]


class RangeConstraint(Struct, kw_only=True):
    min_val: Annotated[Optional[I64], Id(10)] = None
    max_val: Annotated[Optional[I64], Id(20)] = None
    expr: Annotated[Expr, Id(30)]


class GuardProperty(enum.IntEnum):
    VALUE = 1
    SIZE = 2
    STRIDE = 3
    STORAGE_OFFSET = 4


class GuardKey(Union, kw_only=True):
    name: Annotated[Optional[str], Id(10)] = None
    index: Annotated[Optional[I64], Id(20)] = None
    attr: Annotated[Optional[str], Id(30)] = None


class GuardSource(Struct, kw_only=True):
    symbol: Annotated[str, Id(10)]
    path: Annotated[list[GuardKey], Id(20)]
    property: Annotated[GuardProperty, Id(30)]
    dim: Annotated[Optional[I64], Id(40)] = None


class InputGuards(Struct, kw_only=True):
    sources: Annotated[list[GuardSource], Id(10)]
    checks: Annotated[list[Expr], Id(20)]


class ExportedProgram(Struct, kw_only=True):
    graph_module: Annotated[GraphModule, Id(10)]
    opset_version: Annotated[dict[str, I64], Id(20)]
    range_constraints: Annotated[list[RangeConstraint], Id(30)]
    schema_version: Annotated[SchemaVersion, Id(60)]
    verifiers: Annotated[list[str], Id(70)]
    torch_version: Annotated[str, Id(80)]
    guards: Annotated[Optional[InputGuards], Id(90)] = None


# ---------------------------------------------------------------- weights.json


class Storage(Struct, kw_only=True):
    sha256: Annotated[str, Id(10)]
    nbytes: Annotated[I64, Id(20)]
    device: Annotated[Optional[Device], Id(30)] = None  # added 2.3
    external: Annotated[Optional["ExternalTensor"], Id(40)] = None  # added 2.6


class ExternalTensor(Struct, kw_only=True):
    file: Annotated[I64, Id(10)]
    key: Annotated[str, Id(20)]


class WeightsFile(Struct, kw_only=True):
    name: Annotated[str, Id(10)]
    size: Annotated[I64, Id(20)]
    sha256: Annotated[str, Id(30)]
    xxh3: Annotated[str, Id(40)]


class StoredTensor(Struct, kw_only=True):
    dtype: Annotated[ScalarType, Id(10)]
    sizes: Annotated[list[I64], Id(20)]
    strides: Annotated[list[I64], Id(30)]
    storage_offset: Annotated[I64, Id(40)]
    storage: Annotated[I64, Id(50)]
    requires_grad: Annotated[bool, Id(60)]
    subclass: Annotated[Optional["TensorSubclass"], Id(70)] = None  # added 2.3


class TensorSubclass(Struct, kw_only=True):
    class_name: Annotated[str, Id(10)]
    inner: Annotated[dict[str, StoredTensor], Id(20)]
    context: Annotated["ContextValue", Id(30)]


class ContextValue(Union, kw_only=True):
    as_none: Annotated[Optional[bool], Id(10)] = None
    as_int: Annotated[Optional[I64], Id(20)] = None
    as_float: Annotated[Optional[F64], Id(30)] = None
    as_string: Annotated[Optional[str], Id(40)] = None
    as_bool: Annotated[Optional[bool], Id(50)] = None
    as_list: Annotated[Optional[list["ContextValue"]], Id(60)] = None
    as_tuple: Annotated[Optional[list["ContextValue"]], Id(70)] = None
    as_dict: Annotated[Optional[list["ContextItem"]], Id(80)] = None
    as_dtype: Annotated[Optional[ScalarType], Id(90)] = None
    as_size: Annotated[Optional[list[I64]], Id(100)] = None
    as_device: Annotated[Optional[Device], Id(110)] = None


class ContextItem(Struct, kw_only=True):
    key: Annotated[ContextValue, Id(10)]
    value: Annotated[ContextValue, Id(20)]


class ExampleLeaf(Union, kw_only=True):
    as_none: Annotated[Optional[bool], Id(10)] = None
    as_tensor: Annotated[Optional[StoredTensor], Id(20)] = None
    as_int: Annotated[Optional[I64], Id(30)] = None
    as_float: Annotated[Optional[F64], Id(40)] = None
    as_bool: Annotated[Optional[bool], Id(50)] = None
    as_string: Annotated[Optional[str], Id(60)] = None


class ExampleInputs(Struct, kw_only=True):
    spec: Annotated[TreeSpec, Id(10)]
    leaves: Annotated[list[ExampleLeaf], Id(20)]


class Weights(Struct, kw_only=True):
    storages: Annotated[list[Storage], Id(10)]
    state_dict: Annotated[dict[str, StoredTensor], Id(20)]
    constants: Annotated[dict[str, StoredTensor], Id(30)]
    example_inputs: Annotated[Optional[ExampleInputs], Id(40)] = None
    files: Annotated[Optional[list[WeightsFile]], Id(50)] = None  # added 2.6


# ---------------------------------------------------------------- debug.json


class NodeDebug(Struct, kw_only=True):
    stack_trace: Annotated[Optional[str], Id(10)] = None
    from_node: Annotated[Optional[str], Id(20)] = None
    module_types: Annotated[Optional[dict[str, str]], Id(30)] = None


class DebugInfo(Struct, kw_only=True):
    nodes: Annotated[dict[str, NodeDebug], Id(10)] = {}


# ---------------------------------------------------------------- manifest.json


class Member(Struct, kw_only=True):
    sha256: Annotated[str, Id(10)]
    size: Annotated[I64, Id(20)]
    xxh3: Annotated[Optional[str], Id(30)] = None  # added 2.4


class Manifest(Struct, kw_only=True):
    format: Annotated[str, Id(10)]
    format_version: Annotated[I64, Id(20)]
    schema_version: Annotated[SchemaVersion, Id(30)]
    torch_version: Annotated[str, Id(40)]
    members: Annotated[dict[str, Member], Id(50)]


if any(len(u.__struct_fields__) > len(_NONES) for u in Union.__subclasses__()):  # checked at import, also under -O
    raise AssertionError("a union has more members than _NONES has entries: grow _NONES")
