// pt2serde wire schema: the source of truth. src/serde/schema.py mirrors it one-to-one.
//
// SCHEMA_VERSION 2.6
//
// Version history (date, change, compatibility):
//   1.0  2026-11-22  First release.
//   2.0  2026-11-22  Symbolic expressions are structured trees (Expr) instead of sympy-printed
//                    strings: SymExpr.expr_str (id 10) is replaced by SymExpr.expr (id 30), and
//                    range_constraints is a list of RangeConstraint{expr, min_val, max_val}.
//                    Breaking; upgraders/v1_to_v2.py converts 1.x artifacts (fixtures/v1.0/).
//   2.1  2026-11-22  debug.json is described here (DebugInfo, NodeDebug). Compatible.
//   2.2  2026-11-22  Argument.as_tuple: a tuple of mixed kinds (flex_attention's block mask).
//                    Compatible.
//   2.3  2026-11-23  ExportedProgram.guards: the input checks torch.export recorded while tracing
//                    (ep._guards_code), stored as Expr trees over a table of input sources instead
//                    of Python text. Weights: tensor subclasses (StoredTensor.subclass: inner
//                    tensors plus the flatten context as ContextValue data), tensors saved without
//                    data (FakeTensors, meta tensors: empty Storage.sha256) and the device of every
//                    storage (Storage.device). Compatible; a 2.2 reader refuses data-less and
//                    subclass tensors (storage index -1, empty sha256) instead of misreading them,
//                    loads other storages on the CPU, and ignores guards.
//   2.4  2026-11-23  Member.xxh3: a fast digest (XXH3-128) of every archive member next to its
//                    sha256, which load verifies instead of recomputing the sha256 (pt2serde
//                    check still verifies both). Compatible; a 2.3 reader ignores it and checks
//                    the sha256.
//   2.5  2026-11-28  TreeSpec type "structseq": torch's named results (torch.return_types.max,
//                    topk, svd...), stored as their name and fields. Compatible; a 2.4 reader
//                    refuses such a spec as an unknown pytree type.
//   2.6  2026-12-02  Weights in safetensors files next to the artifact (save(..., weights=...)):
//                    Weights.files records each file's name, size, sha256 and XXH3-128, and
//                    Storage.external names the file and key holding a storage's bytes (no
//                    data/<sha256> member then). Compatible; such an artifact says archive
//                    format version 4, which a 2.5 reader refuses by version.
//                    GuardKey.attr: a guard reads a field of a dataclass or namedtuple input as an
//                    attribute (L['inputs'].a.size()[0]), as torch's pytree keys name it.
//                    Compatible; a 2.5 reader refuses such a key as an unknown union member.
//
// Rules (enforced by `pt2serde schema check`):
//   * Every field has a thrift id; ids are never reused.      last used ids are noted per struct.
//   * Enum values are explicit and never reused.
//   * Unions are written as single-key JSON objects: {"as_tensor": {"name": "x"}}.
//   * A `double` that is nan, inf or -inf is written as the JSON string "nan", "inf" or "-inf".
//   * Optional fields are omitted from JSON when unset; readers ignore fields they do not know.
//   * A new optional field, union member or enum value is a minor bump; anything else is major.

namespace py serde.core.schema

enum ScalarType {
  UNKNOWN = 0,
  BYTE = 1,
  CHAR = 2,
  SHORT = 3,
  INT = 4,
  LONG = 5,
  HALF = 6,
  FLOAT = 7,
  DOUBLE = 8,
  COMPLEXHALF = 9,
  COMPLEXFLOAT = 10,
  COMPLEXDOUBLE = 11,
  BOOL = 12,
  BFLOAT16 = 13,
  UINT16 = 28,
  FLOAT8E4M3FN = 29,
  FLOAT8E5M2 = 30,
  FLOAT8E4M3FNUZ = 31,
  FLOAT8E5M2FNUZ = 32,
  FLOAT8E8M0FNU = 33,
  UINT32 = 34,
  UINT64 = 35,
  // last used: 35
}

enum Layout {
  Unknown = 0,
  SparseCoo = 1,
  SparseCsr = 2,
  SparseCsc = 3,
  SparseBsr = 4,
  SparseBsc = 5,
  _mkldnn = 6,
  Strided = 7,
  // last used: 7
}

enum MemoryFormat {
  Unknown = 0,
  ContiguousFormat = 1,
  ChannelsLast = 2,
  ChannelsLast3d = 3,
  PreserveFormat = 4,
  // last used: 4
}

enum ArgumentKind {
  UNKNOWN = 0,
  POSITIONAL = 1,
  KEYWORD = 2,
  // last used: 2
}

struct Device {
  10: string type;
  20: optional i64 index;
}

union SymExprHint {
  10: i64 as_int;
  20: bool as_bool;
  30: double as_float;
}

// Constants of the expression language.
enum ExprConstant {
  TRUE = 1,
  FALSE = 2,
  INFINITY = 3,
  NEG_INFINITY = 4,
  INT_INFINITY = 5,             // torch's int_oo: unbounded integer
  NEG_INT_INFINITY = 6,
  NAN = 7,
  COMPLEX_INFINITY = 8,
  // last used: 8
}

struct Rational {
  10: i64 p;
  20: i64 q;
}

// A unary function torch keeps opaque (OpaqueUnaryFn_<fn>): fn is one of sqrt, cos, cosh, sin,
// sinh, tan, tanh, asin, acos, atan, exp, log, asinh, log2.
struct OpaqueUnary {
  10: string fn;
  20: Expr arg;
}

// A symbolic expression as a tree (added 2.0). Symbols are named as torch names them (s0: backed
// size, u0: unbacked int, zf0/zuf0: floats). Function members hold their operands in order;
// piecewise holds (value, condition) pairs flattened: [v0, c0, v1, c1, ...].
union Expr {
  10: string symbol;
  20: i64 integer;
  30: double floating;
  40: Rational rational;
  50: ExprConstant constant;
  60: OpaqueUnary opaque_unary;
  100: list<Expr> add;
  101: list<Expr> mul;
  102: list<Expr> pow;
  110: list<Expr> eq;
  111: list<Expr> ne;
  112: list<Expr> lt;
  113: list<Expr> le;
  114: list<Expr> gt;
  115: list<Expr> ge;
  120: list<Expr> logical_and;
  121: list<Expr> logical_or;
  122: list<Expr> logical_not;
  123: list<Expr> ite;
  124: list<Expr> piecewise;
  130: list<Expr> abs;
  131: list<Expr> floor;
  132: list<Expr> ceiling;
  200: list<Expr> floor_div;
  201: list<Expr> mod;
  202: list<Expr> python_mod;
  203: list<Expr> clean_div;
  204: list<Expr> ceil_div;
  205: list<Expr> modular_indexing;
  206: list<Expr> where;
  207: list<Expr> ceil_to_int;
  208: list<Expr> floor_to_int;
  209: list<Expr> trunc_to_int;
  210: list<Expr> trunc_to_float;
  211: list<Expr> round_to_int;
  212: list<Expr> round_decimal;
  213: list<Expr> to_float;
  214: list<Expr> int_true_div;
  215: list<Expr> float_true_div;
  216: list<Expr> pow_by_natural;
  217: list<Expr> float_pow;
  218: list<Expr> lshift;
  219: list<Expr> rshift;
  220: list<Expr> identity;
  221: list<Expr> max;
  222: list<Expr> min;
  223: list<Expr> is_non_overlapping_and_dense;
  224: list<Expr> bitwise_and;
  225: list<Expr> bitwise_or;
  226: list<Expr> bitwise_xor;
  // last used: 226
}

// A symbolic expression with the value it had when the program was exported, if known.
struct SymExpr {
  // 10: expr_str (string) until 1.x; retired in 2.0.
  20: optional SymExprHint hint;
  30: Expr expr;                // added 2.0
}

union SymInt {
  10: SymExpr as_expr;
  20: i64 as_int;
}

union SymFloat {
  10: SymExpr as_expr;
  20: double as_float;
}

union SymBool {
  10: SymExpr as_expr;
  20: bool as_bool;
}

struct TensorMeta {
  10: ScalarType dtype;
  20: list<SymInt> sizes;
  30: bool requires_grad;
  40: Device device;
  50: list<SymInt> strides;
  60: SymInt storage_offset;
  70: Layout layout;
}

union SymIntArgument {
  10: string as_name;
  20: i64 as_int;
}

union SymFloatArgument {
  10: string as_name;
  20: double as_float;
}

union SymBoolArgument {
  10: string as_name;
  20: bool as_bool;
}

struct TensorArgument {
  10: string name;
}

struct TokenArgument {
  10: string name;
}

union OptionalTensorArgument {
  10: bool as_none;
  20: TensorArgument as_tensor;
}

// A subgraph of a higher-order op (cond branches, map bodies, ...), stored inline.
struct GraphArgument {
  10: string name;
  20: Graph graph;
}

struct CustomObjArgument {
  10: string name;
  20: string class_fqn;
}

struct ComplexValue {
  10: double real;
  20: double imag;
}

// Every value a graph can carry.
union Argument {
  10: bool as_none;
  20: TensorArgument as_tensor;
  30: list<TensorArgument> as_tensors;
  50: i64 as_int;
  70: list<i64> as_ints;
  80: double as_float;
  90: list<double> as_floats;
  100: string as_string;
  101: list<string> as_strings;
  110: SymIntArgument as_sym_int;
  120: list<SymIntArgument> as_sym_ints;
  130: ScalarType as_scalar_type;
  140: MemoryFormat as_memory_format;
  150: Layout as_layout;
  160: Device as_device;
  170: bool as_bool;
  180: list<bool> as_bools;
  182: SymBoolArgument as_sym_bool;
  184: list<SymBoolArgument> as_sym_bools;
  190: list<OptionalTensorArgument> as_optional_tensors;
  200: GraphArgument as_graph;
  210: CustomObjArgument as_custom_obj;
  220: string as_operator;
  230: SymFloatArgument as_sym_float;
  240: list<SymFloatArgument> as_sym_floats;
  250: OptionalTensorArgument as_optional_tensor;
  260: ComplexValue as_complex;
  270: list<list<TensorArgument>> as_nested_tensors;
  280: list<list<i64>> as_int_lists;
  290: map<string, Argument> as_string_to_argument;
  300: list<list<double>> as_float_lists;
  // A tuple whose items are of different kinds, as higher-order ops take them (flex_attention's
  // block mask: ints, tensors, None and a mask graph). Read back as a Python tuple. Since 2.2.
  310: list<Argument> as_tuple;
  // last used: 310
}

struct NamedArgument {
  10: string name;
  20: Argument arg;
  30: optional ArgumentKind kind;
}

// nn_module_stack entry: key -> (module path, module type name).
struct ModuleStackEntry {
  10: string key;
  20: string path;
  30: optional string type_name;
}

// source_fn_stack / torch_fn entry: (name, function or class qualified name).
struct SourceFn {
  10: string name;
  20: string target;
}

struct NodeMetadata {
  10: optional string stack_trace;
  20: optional list<ModuleStackEntry> nn_module_stack;
  30: optional list<SourceFn> source_fn_stack;
  40: optional SourceFn torch_fn;
  50: optional string custom;          // JSON text of node.meta["custom"], keys sorted
  60: optional string from_node;       // JSON text of node.meta["from_node"] provenance (debug only)
}

struct Node {
  10: string target;
  20: list<NamedArgument> inputs;
  30: list<Argument> outputs;
  40: NodeMetadata metadata;
  50: optional bool is_hop_single_tensor_return;
  60: string name;
}

struct Graph {
  10: list<Argument> inputs;
  20: list<Argument> outputs;
  30: list<Node> nodes;
  40: map<string, TensorMeta> tensor_values;
  50: map<string, SymInt> sym_int_values;
  60: map<string, SymBool> sym_bool_values;
  70: bool is_single_tensor_return;
  80: map<string, CustomObjArgument> custom_obj_values;
  90: map<string, SymFloat> sym_float_values;
}

struct UserInputSpec {
  10: Argument arg;
}

union ConstantValue {
  10: bool as_none;
  20: i64 as_int;
  30: double as_float;
  40: string as_string;
  50: bool as_bool;
}

struct InputToConstantInputSpec {
  10: string name;
  20: ConstantValue value;
}

struct InputToParameterSpec {
  10: TensorArgument arg;
  20: string parameter_name;
}

struct InputToBufferSpec {
  10: TensorArgument arg;
  20: string buffer_name;
  30: bool persistent;
}

struct InputToTensorConstantSpec {
  10: TensorArgument arg;
  20: string tensor_constant_name;
}

struct InputToCustomObjSpec {
  10: CustomObjArgument arg;
  20: string custom_obj_name;
}

struct InputTokenSpec {
  10: TokenArgument arg;
}

union InputSpec {
  10: UserInputSpec user_input;
  20: InputToParameterSpec parameter;
  30: InputToBufferSpec buffer;
  40: InputToTensorConstantSpec tensor_constant;
  50: InputToCustomObjSpec custom_obj;
  60: InputToConstantInputSpec constant_input;
  70: InputTokenSpec token;
  // last used: 70
}

struct UserOutputSpec {
  10: Argument arg;
}

struct LossOutputSpec {
  10: TensorArgument arg;
}

struct BufferMutationSpec {
  10: TensorArgument arg;
  20: string buffer_name;
}

struct ParameterMutationSpec {
  10: TensorArgument arg;
  20: string parameter_name;
}

struct GradientToParameterSpec {
  10: TensorArgument arg;
  20: string parameter_name;
}

struct GradientToUserInputSpec {
  10: TensorArgument arg;
  20: string user_input_name;
}

struct UserInputMutationSpec {
  10: TensorArgument arg;
  20: string user_input_name;
}

struct OutputTokenSpec {
  10: TokenArgument arg;
}

union OutputSpec {
  10: UserOutputSpec user_output;
  20: LossOutputSpec loss_output;
  30: BufferMutationSpec buffer_mutation;
  40: GradientToParameterSpec gradient_to_parameter;
  50: GradientToUserInputSpec gradient_to_user_input;
  60: UserInputMutationSpec user_input_mutation;
  70: OutputTokenSpec token;
  80: ParameterMutationSpec parameter_mutation;
  // last used: 80
}

struct GraphSignature {
  10: list<InputSpec> input_specs;
  20: list<OutputSpec> output_specs;
}

// A pytree spec. `type` is a builtin container name ("tuple", "list", "dict", "namedtuple",
// "OrderedDict", "defaultdict", "deque", "None"), "structseq" (one of torch.return_types, added
// 2.5) or "registered:" and the serialized name of a registered type; a leaf has type "*".
// `context` is JSON text (dict keys; {"name", "fields"} of a namedtuple or structseq, ...).
struct TreeSpec {
  10: string type;
  20: optional string context;
  30: list<TreeSpec> children = [];
}

struct ModuleCallSignature {
  10: list<Argument> inputs;
  20: list<Argument> outputs;
  30: TreeSpec in_spec;
  40: TreeSpec out_spec;
  50: optional list<string> forward_arg_names;
}

struct ModuleCallEntry {
  10: string fqn;
  30: optional ModuleCallSignature signature;
}

struct GraphModule {
  10: Graph graph;
  40: optional string custom;          // JSON text of graph_module.meta["custom"]
  50: GraphSignature signature;
  60: list<ModuleCallEntry> module_call_graph;
}

struct SchemaVersion {
  10: i64 major;
  20: i64 minor;
}

// Inclusive bounds of a symbol or derived expression; an unset bound is unbounded (int_oo).
struct RangeConstraint {
  10: optional i64 min_val;
  20: optional i64 max_val;
  30: Expr expr;                // added 2.0 (was the map key in 1.x)
}

// program.json
// ---- guards (added 2.3): checks on the call's inputs that tracing relied on ----
// torch keeps them as Python source text and compiles it; we keep a tree and print the text
// ourselves on load, so nothing from the file is ever executed.

// What a guard reads at the end of a GuardSource path.
enum GuardProperty {
  VALUE = 1,                    // the input itself: an int, SymInt or float input
  SIZE = 2,                     // .size()[dim]
  STRIDE = 3,                   // .stride()[dim]
  STORAGE_OFFSET = 4,           // .storage_offset()
  // last used: 4
}

// One step into the call's inputs: ['x'], [0] or .x (pytree's MappingKey, SequenceKey, GetAttrKey).
union GuardKey {
  10: string name;              // an identifier
  20: i64 index;                // >= 0
  30: string attr;              // an identifier: a field of a dataclass or namedtuple input (added 2.6)
}

// A value a guard reads, e.g. L['y'].size()[0] is path [name "y"], SIZE, dim 0.
struct GuardSource {
  10: string symbol;            // how the guard trees name it: g0, g1, ... in table order
  20: list<GuardKey> path;      // path[0] is a name: a parameter of the exported forward
  30: GuardProperty property;
  40: optional i64 dim;         // set exactly for SIZE and STRIDE
  // last used: 40
}

// Sources are sorted by (path, property, dim) and numbered in that order; checks are sorted by
// their printed text, so equal guards give equal bytes.
struct InputGuards {
  10: list<GuardSource> sources;
  20: list<Expr> checks;         // boolean Expr trees whose symbols are sources[*].symbol
  // last used: 20
}

struct ExportedProgram {
  10: GraphModule graph_module;
  20: map<string, i64> opset_version;
  30: list<RangeConstraint> range_constraints;   // 2.0: a list (was a map keyed by expression text)
  60: SchemaVersion schema_version;
  70: list<string> verifiers;
  80: string torch_version;
  90: optional InputGuards guards;               // added 2.3; omitted when there are none
  // last used: 90
}

// ---- weights.json: tensors stored as raw bytes in content-addressed archive members ----

// One storage; tensors that share it (tied weights, views) stay aliased after load.
struct Storage {
  // member name is "data/<sha256>"; "" for a storage saved without its bytes (a FakeTensor's or a
  // meta tensor's): there is no payload member, and its tensors load as FakeTensors on `device`
  // (meta tensors when the device is "meta").
  10: string sha256;
  20: i64 nbytes;
  // Added 2.3. The device the storage lived on; unset means the CPU. Bytes are always stored from
  // a CPU copy; load puts them back on this device when it exists (see serde.load's map_location).
  30: optional Device device;
  // Added 2.6. Set when the bytes are in a safetensors file next to the artifact instead of a
  // data/<sha256> member; sha256 and nbytes still describe those bytes.
  40: optional ExternalTensor external;
}

// Where a storage's bytes are outside the archive (added 2.6): the whole storage is one tensor
// of a safetensors file, with the dtype and sizes of the view that covers it.
struct ExternalTensor {
  10: i64 file;                        // index into Weights.files
  20: string key;                      // the tensor's key in that file: an FQN of the state dict or constants
}

// A safetensors file holding some of the storages (added 2.6), found next to the artifact.
struct WeightsFile {
  10: string name;                     // a file name, no directory
  20: i64 size;
  30: string sha256;
  40: string xxh3;                     // XXH3-128; serde.load verifies the file with it
}

struct StoredTensor {
  10: ScalarType dtype;
  20: list<i64> sizes;
  30: list<i64> strides;
  40: i64 storage_offset;              // in elements of dtype
  50: i64 storage;                     // index into Weights.storages; -1 when `subclass` is set
  60: bool requires_grad;
  // Added 2.3. A traceable wrapper subclass (__tensor_flatten__ / __tensor_unflatten__): the
  // fields above describe the outer tensor, which has no storage of its own.
  70: optional TensorSubclass subclass;
}

// A tensor subclass as its inner tensors plus its flatten context (added 2.3). Loading rebuilds
// it only when `class_name` is registered with serde.register_tensor_subclass.
struct TensorSubclass {
  10: string class_name;               // registered name; by default "<module>.<qualname>"
  20: map<string, StoredTensor> inner; // attribute name from __tensor_flatten__ -> inner tensor
  30: ContextValue context;
}

// The data of a flatten context (added 2.3). Nothing else is representable.
union ContextValue {
  10: bool as_none;
  20: i64 as_int;
  30: double as_float;
  40: string as_string;
  50: bool as_bool;
  60: list<ContextValue> as_list;
  70: list<ContextValue> as_tuple;
  80: list<ContextItem> as_dict;       // in insertion order
  90: ScalarType as_dtype;
  100: list<i64> as_size;              // torch.Size
  110: Device as_device;
}

struct ContextItem {
  10: ContextValue key;
  20: ContextValue value;
}

union ExampleLeaf {
  10: bool as_none;
  20: StoredTensor as_tensor;
  30: i64 as_int;
  40: double as_float;
  50: bool as_bool;
  60: string as_string;
}

// (args, kwargs) flattened with a pytree spec.
struct ExampleInputs {
  10: TreeSpec spec;
  20: list<ExampleLeaf> leaves;
}

struct Weights {
  10: list<Storage> storages;
  20: map<string, StoredTensor> state_dict;
  30: map<string, StoredTensor> constants;
  40: optional ExampleInputs example_inputs;
  50: optional list<WeightsFile> files;   // added 2.6; omitted when every storage is in the archive
}

// ---- debug.json (optional; written by save(..., debug_info=True)) ----

// Debug-only metadata of one node, kept apart from the canonical program (added 2.1).
struct NodeDebug {
  10: optional string stack_trace;
  20: optional string from_node;
  30: optional map<string, string> module_types;   // canonical nn_module_stack key -> module type name;
                                                    // no longer written: module types stay in the
                                                    // program (ModuleStackEntry.type_name), this is
                                                    // read from artifacts written before
}

// Keyed by "<subgraph path>/<canonical node name>" ("" path for the top graph: bare node names).
struct DebugInfo {
  10: map<string, NodeDebug> nodes = {};
}

// ---- manifest.json ----

struct Member {
  10: string sha256;                   // names payloads (data/<sha256>); check and diff use it
  20: i64 size;
  // Added 2.4. XXH3-128 of the member's bytes (the reference xxHash's canonical form: 32
  // lowercase hex digits). serde.load verifies every byte with it instead of the sha256: it is
  // ~15x faster to compute. Written for every member by 2.4 writers; absent in older artifacts.
  30: optional string xxh3;
}

struct Manifest {
  10: string format;                   // always "pt2serde"
  20: i64 format_version;              // archive layout version
  30: SchemaVersion schema_version;
  40: string torch_version;            // torch that wrote the artifact (informational)
  50: map<string, Member> members;
}
