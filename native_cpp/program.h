// The native program (.pt2n) as C++ structs: a mirror of src/native/format/program.py.
//
// Format knowledge lives in three places only: this header (the tables), decode.cpp (how the
// msgpack header maps onto them, read by key where the header is a map so new fields are
// tolerated) and verify.cpp (the structural checks of src/native/format/verify.py). A format bump
// changes kMaxFormatVersion and, where fields change, decode.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pt2n {

constexpr char kMagic[9] = "PT2SNATV";
constexpr uint32_t kMinFormatVersion = 3;
constexpr uint32_t kMaxFormatVersion = 3;
constexpr uint64_t kAlign = 64;
constexpr uint64_t kDefaultMaxArenaBytes = uint64_t(1) << 36;  // serde.core.limits.Limits.max_arena_bytes
constexpr uint64_t kMaxHeaderBytes = uint64_t(1) << 31;
constexpr uint64_t kDefaultMaxFlowCells = uint64_t(1) << 28;   // serde.core.limits.Limits.max_flow_cells

// The error kinds mirror src/native/errors.py; the binding maps each onto its Python class.
enum class ErrorKind { Format, Version, ArenaTooLarge, InputMismatch, Runtime, ArenaAlias, FlowTooLarge };

struct Error : std::runtime_error {
  ErrorKind kind;
  int64_t instruction = -1;  // the instruction a run failed at, when it failed inside one
  Error(ErrorKind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
};

[[noreturn]] inline void fail(ErrorKind k, const std::string& msg) { throw Error(k, msg); }
// A file whose `where` breaks a rule of the format (native.format.verify.damaged in Python).
[[noreturn]] inline void damaged(const std::string& what, const std::string& where, const std::string& msg) {
  fail(ErrorKind::Format, what + ": " + where + ": " + msg + "; the file is damaged or was not written by pt2serde");
}

// A size, stride or offset: a constant or an expression index.
struct Dim {
  bool sym = false;
  int64_t v = 0;  // the constant, or the index into Program::exprs
};

enum class VK {
  None, Int, Float, Bool, String, IntList, FloatList, BoolList, StringList, Complex, ScalarType, Layout,
  MemoryFormat, Device, Tensor, List, SymInt, SymFloat, SymBool
};

struct Value {
  VK kind = VK::None;
  int64_t i = 0;           // Int, Bool, ScalarType, Layout, MemoryFormat; SymInt/SymBool: expr; Device: index (-1 none)
  double f = 0, imag = 0;  // Float; Complex (f = real)
  std::string s;           // String; Device kind
  std::vector<int64_t> ints;     // IntList, BoolList; List: item value indices
  std::vector<double> floats;    // FloatList
  std::vector<std::string> strs; // StringList
  // Tensor
  int64_t dtype = 0;
  std::vector<Dim> sizes, strides;
  Dim storage_offset;
  int64_t data = -1;
};

struct KernelCall { int64_t op; std::vector<int64_t> args, outs; int64_t out_op = -1; };

enum class IK { Kernel, Move, JumpFalse, Free, Alloc };

struct Instruction {
  IK kind;
  KernelCall k;       // Kernel
  int64_t a = 0;      // Move: src; JumpFalse: cond; Free/Alloc: value
  int64_t b = 0;      // Move: dst; JumpFalse: target
};

struct Operator { std::string name, overload; std::vector<std::vector<int64_t>> returns_alias; };
struct Constant { std::string sha256; int64_t offset, nbytes; };
struct Symbol {
  std::string name; int64_t input = -1, dim = -1, scale = 1, offset = 0;
  std::optional<int64_t> min, max;
};
struct Input { std::string name; int64_t value; bool constant = false; };
struct State { std::string name, kind; int64_t value; bool mutable_ = false; };
struct Allocation { int64_t value, offset, nbytes, start = 0, end = 0; };  // start/end: first and last live instruction
struct DebugHandle { std::string node, op, module; };  // canonical node name, its target, nn_module_stack path
struct MemoryPlan { int64_t arena_size = 0, naive_size = 0, unplanned = 0; std::vector<Allocation> allocations; };

struct Program {
  uint32_t format_version = 0;
  std::vector<Value> values;
  std::vector<Operator> operators;
  std::vector<Instruction> instructions;
  std::vector<std::vector<int64_t>> exprs;
  std::vector<Symbol> symbols;
  std::vector<Constant> constants;
  std::vector<Input> inputs;
  std::vector<int64_t> outputs;
  std::vector<State> state;
  MemoryPlan memory_plan;
  std::optional<std::string> in_spec, out_spec;
  std::vector<int64_t> guards;
  std::vector<std::string> guard_texts;
  std::string torch_version;
  std::vector<DebugHandle> debug_handles;
  std::vector<int64_t> instruction_handles;  // per instruction: index into debug_handles, or -1
  // Safetensors keys (native.run.io): each input's path in (args, kwargs), each output's in the
  // output tree; empty in files of older emitters.
  std::vector<std::string> input_keys, output_keys;
};

// Whether a jump's condition is the constant False (the jump is always taken): decided from the
// value table alone, as native.format.program.is_unconditional, never from what a run wrote into the slot.
inline bool is_unconditional(const Program& p, const Instruction& ins) {
  const Value& c = p.values[size_t(ins.a)];
  return c.kind == VK::Bool && !c.i;
}

struct Limits {
  uint64_t max_arena_bytes = kDefaultMaxArenaBytes;
  uint64_t max_flow_cells = kDefaultMaxFlowCells;
};

// A program file: checks the container, decodes the header and validates the program (and,
// with verify_hashes, every blob's sha256). `segment` receives the byte range of the segment.
struct Loaded {
  Program program;
  std::vector<uint8_t> bytes;  // the whole file
  uint64_t segment_offset = 0, segment_length = 0;
};

Loaded load_file(const std::string& path, const std::string& what, bool verify_hashes = true, Limits limits = {});
Loaded load_bytes(std::vector<uint8_t> bytes, const std::string& what, bool verify_hashes = true, Limits limits = {});

// container.cpp
struct ContainerView { uint32_t version; const uint8_t* header; uint64_t header_len; uint64_t seg_off, seg_len; };
ContainerView unpack_container(const std::vector<uint8_t>& buf, const std::string& what);
std::string sha256_hex(const uint8_t* data, size_t n);

// decode.cpp
Program decode_header(const uint8_t* data, size_t n, const std::string& what);

// verify.cpp
void validate_program(const Program& p, const uint8_t* segment, uint64_t seg_len, const std::string& what,
                      bool verify_hashes, Limits limits);

// kinds.cpp: every kernel argument and output fits its operator, every move its destination (src/native/format/kinds.py).
// Needs the dispatcher's schemas: Method runs it first, on a validated program.
void check_kinds(const Program& p, const std::string& what);

// exprs.cpp: postfix size expressions (src/native/format/exprs.py)
void check_code(const std::vector<int64_t>& code, size_t n_symbols, const std::string& where);
// Evaluates code; nullopt when an unbound (unbacked) symbol is used. Throws Error(Runtime) on
// division by zero or int64 overflow.
std::optional<int64_t> evaluate(const std::vector<int64_t>& code, const std::vector<std::optional<int64_t>>& syms,
                                const std::string& where);

size_t itemsize(int64_t scalar_type);  // 0: unknown scalar type

// plan.cpp: the memory plan's lifetime proof (src/native/format/memory.py verify_plan).
void verify_plan(const Program& p, const std::string& what);
// memory.code_overflow: (position, value) of the first add, mul or pow whose interval over the
// symbols' ranges has a finite bound past int64 (bounds saturate at +-2**100, unbounded).
std::optional<std::pair<int64_t, std::string>> code_overflow(const std::vector<int64_t>& code,
                                                             const std::vector<Symbol>& symbols);
// The instructions the runtime runs out=: every output has an arena slot (memory.out_calls).
std::vector<char> out_calls(const Program& p);
// memory.pack: first-fit of (nbytes, start, end) in the given order, each at the lowest 64-byte
// aligned offset free over its whole lifetime. Returns the offsets and the arena size.
struct PackItem { int64_t nbytes, start, end; };
std::pair<std::vector<int64_t>, int64_t> pack(const std::vector<PackItem>& items);

// Boxed lists nest at most this deep, so every walk over them is bounded (a C++ limit: the
// emitter nests two or three levels).
constexpr size_t kMaxListDepth = 64;
constexpr size_t kMaxLoopDepth = 64;  // native.format.program.MAX_LOOP_DEPTH

}  // namespace pt2n
