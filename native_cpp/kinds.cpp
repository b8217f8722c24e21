// The value-kind check (src/native/format/kinds.py, whose docstring holds the tables): every kernel
// argument's declared kind must be one its operator's parameter takes, every output one its return
// may be written to, and every move's destination must hold its source's kind. Same rules, same
// order and same messages as Python: an unchecked file could otherwise run in one runtime
// (torch.ops converts an int, a tensor or None to a bool parameter) and fail in the other (a boxed
// call refuses them).
#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <memory>
#include <set>

#include "program.h"

namespace pt2n {

namespace {
using Mask = uint32_t;
constexpr Mask bit(VK k) { return Mask(1) << int(k); }

constexpr Mask kNumbers = bit(VK::Int) | bit(VK::Float) | bit(VK::Bool) | bit(VK::Complex) | bit(VK::SymInt) |
                          bit(VK::SymFloat) | bit(VK::SymBool);
constexpr Mask kInts = bit(VK::Int) | bit(VK::SymInt);
constexpr Mask kFloats = bit(VK::Float) | bit(VK::Int) | bit(VK::SymFloat) | bit(VK::SymInt);
constexpr Mask kBools = bit(VK::Bool) | bit(VK::SymBool);

// The value kinds one parameter (or list item) takes.
struct Takes {
  Mask kinds = 0;
  std::shared_ptr<const Takes> items;  // a list type: what each item takes
  bool any = false;
};

struct Param {
  std::string name, type;  // as messages show them: 'keepdim', bool
  Takes takes;
  bool has_default = false;
};

struct Return {
  std::string type;  // the schema's spelling: Tensor, Tensor[], SymInt
  Takes gives;       // the value kinds it may be written to
};

struct Signature {
  std::vector<Param> params;
  size_t n_out = 0;  // out= arguments (not in params)
  std::vector<Return> returns;
};

constexpr Mask kSymbolic = bit(VK::SymInt) | bit(VK::SymFloat) | bit(VK::SymBool);

// What a move may write into a value of kind k; nullopt: a move never writes such a value.
std::optional<Mask> moves_into(VK k) {
  switch (k) {
    case VK::Tensor: return bit(VK::Tensor) | bit(VK::None);  // None: with_effects' token placeholder
    case VK::SymInt: return kInts;
    case VK::SymFloat: return kFloats;
    case VK::SymBool: return kBools;
    case VK::None: case VK::Int: case VK::Float: case VK::Bool: case VK::String: case VK::IntList:
    case VK::FloatList: case VK::BoolList: case VK::StringList: case VK::Complex: case VK::ScalarType:
    case VK::Layout: case VK::MemoryFormat: case VK::Device: case VK::List:
      return std::nullopt;
  }
  return std::nullopt;
}

const char* kind_name(VK k) {
  switch (k) {
    case VK::None: return "None"; case VK::Int: return "Int"; case VK::Float: return "Float";
    case VK::Bool: return "Bool"; case VK::String: return "String"; case VK::IntList: return "IntList";
    case VK::FloatList: return "FloatList"; case VK::BoolList: return "BoolList"; case VK::StringList: return "StringList";
    case VK::Complex: return "Complex"; case VK::ScalarType: return "ScalarType"; case VK::Layout: return "Layout";
    case VK::MemoryFormat: return "MemoryFormat"; case VK::Device: return "Device"; case VK::Tensor: return "Tensor";
    case VK::List: return "List"; case VK::SymInt: return "SymInt"; case VK::SymFloat: return "SymFloat";
    case VK::SymBool: return "SymBool";
  }
  return "?";
}

// A constant list is a list of items of this kind.
std::optional<VK> item_kind(VK k) {
  switch (k) {
    case VK::IntList: return VK::Int; case VK::FloatList: return VK::Float; case VK::BoolList: return VK::Bool;
    case VK::StringList: return VK::String; default: return std::nullopt;
  }
}

// aten operators (by name, any overload) whose bare Tensor parameters take numbers: torch.ops makes
// a number a wrapped-number tensor for these only (kinds.py NUMBERS_AS_TENSORS).
bool numbers_as_tensors(const std::string& name) {
  static const std::set<std::string> names = {
      "_conj", "_to_copy", "add", "add_", "copy", "copy_", "div", "div_", "divide", "divide_", "floor_divide",
      "floor_divide_", "mul", "mul_", "multiply", "multiply_", "sub", "sub_", "subtract", "subtract_", "to",
      "true_divide", "true_divide_"};
  return name.rfind("aten::", 0) == 0 && names.count(name.substr(6)) > 0;
}

// What a parameter of torch type `t` takes; `wrap`: a number is taken for a bare Tensor.
Takes takes_of(const c10::Type& t, bool wrap) {
  using K = c10::TypeKind;
  Takes out;
  switch (t.kind()) {
    case K::OptionalType:
      out = takes_of(*t.expectRef<c10::OptionalType>().getElementType(), false);
      out.kinds |= bit(VK::None);
      return out;
    case K::ListType:
      out.items = std::make_shared<const Takes>(takes_of(*t.expectRef<c10::ListType>().getElementType(), false));
      return out;
    case K::AnyType: case K::VarType: out.any = true; return out;
    case K::TensorType: out.kinds = bit(VK::Tensor) | (wrap ? kNumbers : 0); return out;
    case K::IntType: case K::SymIntType: out.kinds = kInts; return out;
    case K::FloatType: case K::SymFloatType: out.kinds = kFloats; return out;
    case K::BoolType: case K::SymBoolType: out.kinds = kBools; return out;
    case K::NumberType: out.kinds = kNumbers; return out;
    case K::ComplexType: out.kinds = bit(VK::Complex) | bit(VK::Float) | bit(VK::Int) | bit(VK::SymFloat) | bit(VK::SymInt); return out;
    case K::StringType: out.kinds = bit(VK::String); return out;
    case K::ScalarTypeType: out.kinds = bit(VK::ScalarType) | bit(VK::Int); return out;
    case K::LayoutType: out.kinds = bit(VK::Layout) | bit(VK::Int); return out;
    case K::MemoryFormatType: out.kinds = bit(VK::MemoryFormat) | bit(VK::Int); return out;
    case K::DeviceObjType: out.kinds = bit(VK::Device); return out;
    default: return out;  // Generator, Storage, classes, dicts, ...: the emitter has no value for them
  }
}

// The value kinds a result of torch type `t` may be written to (a None result is discarded).
Takes gives_of(const c10::Type& t) {
  using K = c10::TypeKind;
  Takes out;
  switch (t.kind()) {
    case K::OptionalType: return gives_of(*t.expectRef<c10::OptionalType>().getElementType());
    case K::ListType:
      out.items = std::make_shared<const Takes>(gives_of(*t.expectRef<c10::ListType>().getElementType()));
      return out;
    case K::AnyType: case K::VarType: out.any = true; return out;
    case K::TensorType: out.kinds = bit(VK::Tensor); return out;
    case K::IntType: case K::SymIntType: out.kinds = bit(VK::SymInt); return out;
    case K::FloatType: case K::SymFloatType: out.kinds = bit(VK::SymFloat); return out;
    case K::BoolType: case K::SymBoolType: out.kinds = bit(VK::SymBool); return out;
    case K::NumberType: out.kinds = kSymbolic; return out;
    default: return out;  // str, ScalarType, Device, ...: the emitter has no run-time value for them
  }
}

// Kind names in the value table's order, as messages list them: "Int, SymInt".
std::string names(Mask m) {
  std::string out;
  for (int k = 0; k <= int(VK::SymBool); ++k)
    if (m & bit(VK(k))) out += (out.empty() ? "" : ", ") + std::string(kind_name(VK(k)));
  return out;
}

// The symbolic:: operators (src/native/format/prim.py) take numbers and return one.
const std::map<std::string, Signature>& prim_signatures() {
  static const std::map<std::string, Signature> table = [] {
    Takes number;
    number.kinds = kNumbers & ~bit(VK::Complex);
    Param a{"'a'", "number", number}, b{"'b'", "number", number}, x{"'x'", "number", number}, c{"'c'", "number", number};
    Takes numbers;
    numbers.items = std::make_shared<const Takes>(number);
    Takes symbolic;
    symbolic.kinds = kSymbolic;
    const std::vector<Return> rets{Return{"number", symbolic}};
    std::map<std::string, Signature> t;
    for (const char* n : {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "eq", "ne", "lt", "le", "gt", "ge",
                          "and", "or", "lshift", "rshift", "max", "min"})
      t[n] = Signature{{a, b}, 0, rets};
    for (const char* n : {"neg", "pos", "abs", "floor", "ceil", "trunc", "round", "not", "float", "int", "sqrt"})
      t[n] = Signature{{x}, 0, rets};
    t["ite"] = Signature{{c, a, b}, 0, rets};
    t["sum"] = Signature{{Param{"'xs'", "number[]", numbers}}, 0, rets};
    return t;
  }();
  return table;
}

// The operator's parameters; nullopt when it is not known here (the runtime names it at load).
std::optional<Signature> signature(const Operator& op) {
  if (op.name.rfind("symbolic::", 0) == 0) {
    if (op.overload != "default") return std::nullopt;
    const auto& prims = prim_signatures();
    auto it = prims.find(op.name.substr(10));
    if (it == prims.end()) return std::nullopt;
    return it->second;
  }
  auto h = c10::Dispatcher::singleton().findSchema({op.name, op.overload == "default" ? "" : op.overload});
  if (!h) return std::nullopt;
  Signature sig;
  const bool wrap = numbers_as_tensors(op.name);
  for (const auto& arg : h->schema().arguments()) {
    if (arg.is_out()) {
      ++sig.n_out;
      continue;
    }
    sig.params.push_back(Param{"'" + arg.name() + "'", arg.real_type()->str(), takes_of(*arg.real_type(), wrap),
                               arg.default_value().has_value()});
  }
  for (const auto& r : h->schema().returns()) sig.returns.push_back(Return{r.real_type()->str(), gives_of(*r.real_type())});
  return sig;
}

struct Misfit { std::string path; int64_t value; };

// nullopt when value v fits; else the path of the item that does not ("" for v itself) and that item.
std::optional<Misfit> misfit(const Takes& takes, const Program& p, int64_t v) {
  const Value& val = p.values[size_t(v)];
  if (takes.any || (takes.kinds & bit(val.kind))) return std::nullopt;
  if (takes.items) {
    if (val.kind == VK::List) {
      for (size_t i = 0; i < val.ints.size(); ++i) {
        auto bad = misfit(*takes.items, p, val.ints[i]);
        if (bad) return Misfit{"items[" + std::to_string(i) + "]" + (bad->path.empty() ? "" : "." + bad->path), bad->value};
      }
      return std::nullopt;
    }
    auto item = item_kind(val.kind);
    if (item) {
      bool empty = val.kind == VK::FloatList ? val.floats.empty() : val.kind == VK::StringList ? val.strs.empty() : val.ints.empty();
      if (empty || takes.items->any || (takes.items->kinds & bit(*item))) return std::nullopt;
    }
  }
  return Misfit{"", v};
}

// nullopt when a result may be written to value v; else the path of the item that may not ("" for v
// itself) and that item. Unlike an argument, never a constant list.
std::optional<Misfit> unwritable(const Takes& gives, const Program& p, int64_t v) {
  const Value& val = p.values[size_t(v)];
  if (gives.any || (gives.kinds & bit(val.kind))) return std::nullopt;
  if (gives.items && val.kind == VK::List) {
    for (size_t i = 0; i < val.ints.size(); ++i) {
      auto bad = unwritable(*gives.items, p, val.ints[i]);
      if (bad) return Misfit{"items[" + std::to_string(i) + "]" + (bad->path.empty() ? "" : "." + bad->path), bad->value};
    }
    return std::nullopt;
  }
  return Misfit{"", v};
}

struct Checker {
  const Program& p;
  const std::string& what;

  [[noreturn]] void bad(const std::string& where, const std::string& msg) const {
    damaged(what, where, msg);
  }

  // Messages are built only on failure: this runs once per kernel call of the program.
  void call(size_t pc, const KernelCall& k, const Operator& op, const Signature& sig) const {
    const auto& params = sig.params;
    auto at = [pc] { return "instructions[" + std::to_string(pc) + "]"; };
    auto name = [&op] { return "operator " + op.name + "." + op.overload; };
    if (k.args.size() > params.size())
      bad(at(), name() + " takes " + std::to_string(params.size()) + " arguments, the call gives " +
                    std::to_string(k.args.size()));
    for (size_t j = 0; j < k.args.size(); ++j) {
      const int64_t a = k.args[j];
      const Takes& takes = params[j].takes;
      if (takes.any || (takes.kinds & bit(p.values[size_t(a)].kind))) continue;  // the common case: one test
      auto m = misfit(takes, p, a);
      if (!m) continue;
      std::string got = std::to_string(a) + " (kind " + kind_name(p.values[size_t(a)].kind);
      if (!m->path.empty())
        got += ": its " + m->path + " is value " + std::to_string(m->value) + ", kind " + kind_name(p.values[size_t(m->value)].kind);
      bad(at() + ".args[" + std::to_string(j) + "]", name() + " parameter " + params[j].name + " (" + params[j].type +
                                                         ") cannot take value " + got + ")");
    }
    for (size_t j = k.args.size(); j < params.size(); ++j)
      if (!params[j].has_default)
        bad(at(), name() + " parameter " + params[j].name + " (" + params[j].type + ") is not given and has no default");
  }

  void outputs(size_t pc, const KernelCall& k, const Operator& op, const Signature& sig) const {
    const auto& returns = sig.returns;
    auto at = [pc] { return "instructions[" + std::to_string(pc) + "]"; };
    auto name = [&op] { return "operator " + op.name + "." + op.overload; };
    if (k.outs.size() != returns.size())
      bad(at(), name() + " returns " + std::to_string(returns.size()) + " values, the call lists " +
                    std::to_string(k.outs.size()) + " outputs");
    for (size_t j = 0; j < k.outs.size(); ++j) {
      const int64_t o = k.outs[j];
      if (o == -1) continue;
      const Takes& gives = returns[j].gives;
      if (gives.any || (gives.kinds & bit(p.values[size_t(o)].kind))) continue;
      auto m = unwritable(gives, p, o);
      if (!m) continue;
      std::string got = std::to_string(o) + " (kind " + kind_name(p.values[size_t(o)].kind);
      if (!m->path.empty())
        got += ": its " + m->path + " is value " + std::to_string(m->value) + ", kind " + kind_name(p.values[size_t(m->value)].kind);
      bad(at() + ".outs[" + std::to_string(j) + "]", name() + " return " + std::to_string(j) + " (" + returns[j].type +
                                                         ") cannot be written to value " + got + ")");
    }
  }

  void kernel(size_t pc, const KernelCall& k, const std::vector<std::optional<Signature>>& sigs) const {
    if (const auto& sig = sigs[size_t(k.op)]) {
      if (sig->n_out) {  // a call's op runs functionally: nothing fills an out= argument there
        const Operator& op = p.operators[size_t(k.op)];
        bad("instructions[" + std::to_string(pc) + "]", "operator " + op.name + "." + op.overload + " has " +
                                                           std::to_string(sig->n_out) + " out= arguments, which a call's "
                                                           "op (run functionally) never fills; name the functional "
                                                           "overload as op and this one as out_op");
      }
      call(pc, k, p.operators[size_t(k.op)], *sig);
      outputs(pc, k, p.operators[size_t(k.op)], *sig);
    }
    if (k.out_op == -1) return;
    const Operator& out = p.operators[size_t(k.out_op)];
    auto at = [pc] { return "instructions[" + std::to_string(pc) + "]"; };
    if (out.name.rfind("symbolic::", 0) == 0) bad(at(), "the out= variant " + out.name + "." + out.overload + " is not a torch operator");
    const auto& sig = sigs[size_t(k.out_op)];
    if (!sig) return;
    call(pc, k, out, *sig);
    if (sig->n_out != k.outs.size())
      bad(at(), "the out= variant " + out.name + "." + out.overload + " has " + std::to_string(sig->n_out) +
                    " out= arguments for " + std::to_string(k.outs.size()) + " outputs");
  }

  void move(size_t pc, int64_t src, int64_t dst) const {
    const VK s = p.values[size_t(src)].kind, d = p.values[size_t(dst)].kind;
    const std::string at = "instructions[" + std::to_string(pc) + "]";
    const auto holds = moves_into(d);
    if (!holds) {
      Mask written = 0;
      for (int k = 0; k <= int(VK::SymBool); ++k) if (moves_into(VK(k))) written |= bit(VK(k));
      bad(at, "moves value " + std::to_string(src) + " into value " + std::to_string(dst) + " (kind " + kind_name(d) +
                  "), which a move never writes (only " + names(written) + " values)");
    }
    if (!(*holds & bit(s)))
      bad(at, "moves value " + std::to_string(src) + " (kind " + kind_name(s) + ") into value " + std::to_string(dst) +
                  " (kind " + kind_name(d) + "), which holds only " + names(*holds));
  }
};
}  // namespace

void check_kinds(const Program& p, const std::string& what) {
  std::vector<std::optional<Signature>> sigs;
  sigs.reserve(p.operators.size());
  for (const Operator& op : p.operators) sigs.push_back(signature(op));
  Checker c{p, what};
  for (size_t pc = 0; pc < p.instructions.size(); ++pc) {
    const Instruction& ins = p.instructions[pc];
    switch (ins.kind) {
      case IK::Kernel: c.kernel(pc, ins.k, sigs); break;
      case IK::Move: c.move(pc, ins.a, ins.b); break;
      case IK::JumpFalse: case IK::Free: case IK::Alloc: break;
    }
  }
}

}  // namespace pt2n
