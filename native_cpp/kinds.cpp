// The value-kind check (src/native/kinds.py, whose docstring holds the table): every kernel
// argument's declared kind must be one its operator's parameter takes. Same rules, same order and
// same messages as Python: an unchecked file could otherwise run in one runtime (torch.ops converts
// an int, a tensor or None to a bool parameter) and fail in the other (a boxed call refuses them).
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

struct Signature {
  std::vector<Param> params;
  size_t n_out = 0;  // out= arguments (not in params)
};

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

// The symbolic:: operators (src/native/prim.py) take numbers.
const std::map<std::string, Signature>& prim_signatures() {
  static const std::map<std::string, Signature> table = [] {
    Takes number;
    number.kinds = kNumbers & ~bit(VK::Complex);
    Param a{"'a'", "number", number}, b{"'b'", "number", number}, x{"'x'", "number", number}, c{"'c'", "number", number};
    Takes numbers;
    numbers.items = std::make_shared<const Takes>(number);
    std::map<std::string, Signature> t;
    for (const char* n : {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "eq", "ne", "lt", "le", "gt", "ge",
                          "and", "or", "lshift", "rshift", "max", "min"})
      t[n] = Signature{{a, b}};
    for (const char* n : {"neg", "pos", "abs", "floor", "ceil", "trunc", "round", "not", "float", "int", "sqrt"})
      t[n] = Signature{{x}};
    t["ite"] = Signature{{c, a, b}};
    t["sum"] = Signature{{Param{"'xs'", "number[]", numbers}}};
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
};
}  // namespace

void check_kinds(const Program& p, const std::string& what) {
  std::vector<std::optional<Signature>> sigs;
  sigs.reserve(p.operators.size());
  for (const Operator& op : p.operators) sigs.push_back(signature(op));
  Checker c{p, what};
  for (size_t pc = 0; pc < p.instructions.size(); ++pc) {
    const Instruction& ins = p.instructions[pc];
    if (ins.kind != IK::Kernel) continue;
    const KernelCall& k = ins.k;
    if (sigs[size_t(k.op)]) c.call(pc, k, p.operators[size_t(k.op)], *sigs[size_t(k.op)]);
    if (k.out_op == -1) continue;
    const Operator& out = p.operators[size_t(k.out_op)];
    auto at = [pc] { return "instructions[" + std::to_string(pc) + "]"; };
    if (out.name.rfind("symbolic::", 0) == 0) c.bad(at(), "the out= variant " + out.name + "." + out.overload + " is not a torch operator");
    const auto& sig = sigs[size_t(k.out_op)];
    if (!sig) continue;
    c.call(pc, k, out, *sig);
    if (sig->n_out != k.outs.size())
      c.bad(at(), "the out= variant " + out.name + "." + out.overload + " has " + std::to_string(sig->n_out) +
                      " out= arguments for " + std::to_string(k.outs.size()) + " outputs");
  }
}

}  // namespace pt2n
