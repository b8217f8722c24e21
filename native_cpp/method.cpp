// Execution of a native program; see method.h. The structure follows runtime.py: prepare once
// (weights viewing one aligned copy of the segment, operators resolved, arguments pre-coerced
// to their schema types), then run: bind and check inputs, execute the instruction chain.
#include "method.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <tuple>

namespace pt2n {

using c10::IValue;

std::optional<c10::ScalarType> to_scalar_type(int64_t s) {
  using S = c10::ScalarType;
  switch (s) {
    case 1: return S::Byte; case 2: return S::Char; case 3: return S::Short; case 4: return S::Int;
    case 5: return S::Long; case 6: return S::Half; case 7: return S::Float; case 8: return S::Double;
    case 9: return S::ComplexHalf; case 10: return S::ComplexFloat; case 11: return S::ComplexDouble;
    case 12: return S::Bool; case 13: return S::BFloat16; case 28: return S::UInt16;
    case 29: return S::Float8_e4m3fn; case 30: return S::Float8_e5m2; case 31: return S::Float8_e4m3fnuz;
    case 32: return S::Float8_e5m2fnuz; case 33: return S::Float8_e8m0fnu; case 34: return S::UInt32;
    case 35: return S::UInt64;
    default: return std::nullopt;
  }
}

namespace {
std::optional<c10::Layout> to_layout(int64_t v) {
  using L = c10::Layout;
  switch (v) {
    case 1: return L::Sparse; case 2: return L::SparseCsr; case 3: return L::SparseCsc; case 4: return L::SparseBsr;
    case 5: return L::SparseBsc; case 6: return L::Mkldnn; case 7: return L::Strided; default: return std::nullopt;
  }
}
std::optional<c10::MemoryFormat> to_memory_format(int64_t v) {
  using M = c10::MemoryFormat;
  switch (v) {
    case 1: return M::Contiguous; case 2: return M::ChannelsLast; case 3: return M::ChannelsLast3d;
    case 4: return M::Preserve; default: return std::nullopt;
  }
}

// An argument converted to what a boxed kernel expects for `t` (torch.ops does this when it
// parses Python arguments): ints to floats, boxed lists to typed lists.
IValue coerce(const IValue& v, const c10::TypePtr& t) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::TensorType: {
      // A Python number where a tensor is expected: torch's argument parser makes it a
      // "wrapped number" tensor, which type promotion treats like a scalar.
      at::Tensor w;
      if (v.isInt()) w = at::scalar_tensor(v.toInt(), at::TensorOptions().dtype(at::kLong));
      else if (v.isDouble()) w = at::scalar_tensor(v.toDouble(), at::TensorOptions().dtype(at::kDouble));
      else if (v.isBool()) w = at::scalar_tensor(v.toBool(), at::TensorOptions().dtype(at::kBool));
      else if (v.isComplexDouble()) w = at::scalar_tensor(v.toComplexDouble(), at::TensorOptions().dtype(at::kComplexDouble));
      else return v;
      w.unsafeGetTensorImpl()->set_wrapped_number(true);
      return w;
    }
    case K::OptionalType:
      return v.isNone() ? v : coerce(v, t->expectRef<c10::OptionalType>().getElementType());
    case K::FloatType:
      if (v.isInt()) return double(v.toInt());
      if (v.isBool()) return double(v.toBool());
      return v;
    case K::ComplexType:
      if (v.isInt()) return c10::complex<double>(double(v.toInt()), 0);
      if (v.isDouble()) return c10::complex<double>(v.toDouble(), 0);
      return v;
    case K::ListType: {
      if (!v.isList()) return v;  // typed lists (constants) are already right
      const auto& elem = t->expectRef<c10::ListType>().getElementType();
      auto items = v.toListRef();
      switch (elem->kind()) {
        case K::IntType: case K::SymIntType: {
          c10::List<int64_t> l; l.reserve(items.size());
          for (const auto& x : items) {
            if (!x.isInt()) throw std::runtime_error("an int list holds a " + x.tagKind());
            l.push_back(x.toInt());
          }
          return l;
        }
        case K::FloatType: {
          c10::List<double> l; l.reserve(items.size());
          for (const auto& x : items) l.push_back(coerce(x, elem).toDouble());
          return l;
        }
        case K::BoolType: {
          c10::List<bool> l; l.reserve(items.size());
          for (const auto& x : items) l.push_back(x.toBool());
          return l;
        }
        case K::TensorType: {
          c10::List<at::Tensor> l; l.reserve(items.size());
          for (const auto& x : items) {
            if (!x.isTensor()) throw std::runtime_error("a tensor list holds a " + x.tagKind());
            l.push_back(x.toTensor());
          }
          return l;
        }
        default: {
          c10::impl::GenericList l(elem);
          l.reserve(items.size());
          for (const auto& x : items) l.push_back(coerce(x, elem));
          return l;
        }
      }
    }
    default:
      return v;
  }
}

bool truthy(const IValue& v) {
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt() != 0;
  if (v.isDouble()) return v.toDouble() != 0;
  if (v.isTensor()) return v.toTensor().is_nonzero();
  if (v.isNone()) return false;
  throw std::runtime_error("a jump condition is a " + v.tagKind());
}
}  // namespace

Method::Method(Loaded loaded, Options opts) : lp_(std::move(loaded)), opts_(opts) {
  const Program& p = lp_.program;
  check_kinds(p, "native program");
  // One 64-byte aligned, writable copy of the segment (CPU allocations are aligned).
  segment_ = at::empty({int64_t(lp_.segment_length)}, at::TensorOptions().dtype(at::kByte));
  if (lp_.segment_length)
    std::memcpy(segment_.data_ptr(), lp_.bytes.data() + lp_.segment_offset, lp_.segment_length);
  lp_.bytes.clear();
  lp_.bytes.shrink_to_fit();
  initial_.resize(p.values.size());
  for (size_t i = 0; i < p.values.size(); ++i) {
    const Value& v = p.values[i];
    std::string where = "values[" + std::to_string(i) + "]";
    switch (v.kind) {
      case VK::None: case VK::List: case VK::SymInt: case VK::SymFloat: case VK::SymBool: break;
      case VK::Int: initial_[i] = v.i; break;
      case VK::Float: initial_[i] = v.f; break;
      case VK::Bool: initial_[i] = bool(v.i); break;
      case VK::String: initial_[i] = v.s; break;
      case VK::IntList: initial_[i] = c10::List<int64_t>(v.ints); break;
      case VK::FloatList: initial_[i] = c10::List<double>(v.floats); break;
      case VK::BoolList: {
        c10::List<bool> l;
        for (auto b : v.ints) l.push_back(b != 0);
        initial_[i] = l;
        break;
      }
      case VK::StringList: initial_[i] = c10::List<std::string>(v.strs); break;
      case VK::Complex: initial_[i] = c10::complex<double>(v.f, v.imag); break;
      case VK::ScalarType: initial_[i] = int64_t(*to_scalar_type(v.i)); break;
      case VK::Layout: {
        auto l = to_layout(v.i);
        if (!l) fail(ErrorKind::Format, "native program: " + where + ": layout " + std::to_string(v.i) + " has no torch layout; the file is damaged");
        initial_[i] = int64_t(*l);
        break;
      }
      case VK::MemoryFormat: {
        auto m = to_memory_format(v.i);
        if (!m) fail(ErrorKind::Format, "native program: " + where + ": memory format " + std::to_string(v.i) + " has no torch memory format; the file is damaged");
        initial_[i] = int64_t(*m);
        break;
      }
      case VK::Device: {
        try {
          c10::Device d(v.s);
          if (v.i >= 0) d = c10::Device(d.type(), c10::DeviceIndex(v.i));
          initial_[i] = d;
        } catch (const std::exception&) {
          fail(ErrorKind::Format, "native program: " + where + ": device '" + v.s + "' is not a torch device; the file is damaged");
        }
        break;
      }
      case VK::Tensor: {
        if (v.data < 0) break;  // a run-time slot
        const Constant& c = p.constants[size_t(v.data)];
        size_t isz = itemsize(v.dtype);
        std::vector<int64_t> sizes, strides;
        for (auto& d : v.sizes) sizes.push_back(d.v);
        for (auto& d : v.strides) strides.push_back(d.v);
        // Blobs start 64-byte aligned, so the offset is a whole number of elements; the
        // validator checked that the view stays inside the blob.
        initial_[i] = at::empty({0}, at::TensorOptions().dtype(*to_scalar_type(v.dtype)))
                          .set_(segment_.storage(), c.offset / int64_t(isz) + v.storage_offset.v, sizes, strides);
        break;
      }
    }
  }
  for (const State& s : p.state) {
    at::Tensor t = initial_[size_t(s.value)].toTensor();
    if (s.mutable_) {  // identical bytes may be shared in the segment; a written buffer needs its own
      t = t.clone();
      initial_[size_t(s.value)] = t;
    }
    state_.emplace_back(s.name, t);
  }
  if (opts_.arena)
    for (size_t k = 0; k < p.memory_plan.allocations.size(); ++k) alloc_[p.memory_plan.allocations[k].value] = k;
  // Symbolic slots are re-packed for each run's sizes (replan); fixed ones use the stored offsets.
  for (const auto& [v, k] : alloc_) dynamic_plan_ = dynamic_plan_ || symbolic(p.values[size_t(v)]);
  plans_.emplace_back();
  for (const Allocation& a : p.memory_plan.allocations) plans_[0].offsets.push_back(a.offset);
  plans_[0].size = p.memory_plan.arena_size;
  cur_ = &plans_[0];
  arena_ = at::empty({opts_.arena && !dynamic_plan_ ? p.memory_plan.arena_size : 0}, at::TensorOptions().dtype(at::kByte));
  if (p.in_spec.has_value() != p.out_spec.has_value())
    fail(ErrorKind::Format, "native program: it has an in_spec or an out_spec but not both; the emitter writes both "
                            "or neither, so the file is damaged");
  prepare();
}

void Method::prepare() {
  const Program& p = lp_.program;
  // Values any instruction or the caller writes: never pre-coerced as constants.
  std::vector<char> written(p.values.size(), 0);
  for (const Input& in : p.inputs) written[size_t(in.value)] = 1;
  for (const Instruction& ins : p.instructions) {
    switch (ins.kind) {
      case IK::Kernel: for (int64_t o : ins.k.outs) if (o >= 0) written[size_t(o)] = 1; break;
      case IK::Move: written[size_t(ins.b)] = 1; break;
      case IK::Free: case IK::Alloc: written[size_t(ins.a)] = 1; break;
      case IK::JumpFalse: break;
    }
  }
  auto runtime_kind = [&](int64_t i) {
    const Value& v = p.values[size_t(i)];
    return written[size_t(i)] || v.kind == VK::List || v.kind == VK::SymInt || v.kind == VK::SymFloat ||
           v.kind == VK::SymBool || (v.kind == VK::Tensor && v.data < 0);
  };
  std::vector<std::optional<c10::OperatorHandle>> handles(p.operators.size());
  std::vector<PrimFn> prims(p.operators.size(), nullptr);
  for (size_t i = 0; i < p.operators.size(); ++i) {
    const Operator& op = p.operators[i];
    if (op.name.rfind("symbolic::", 0) == 0) {
      prims[i] = op.overload == "default" ? find_prim(op.name.substr(10)) : nullptr;
      if (!prims[i]) fail(ErrorKind::Runtime, "operators[" + std::to_string(i) + "]: unknown symbolic op " + op.name + "." + op.overload);
      continue;
    }
    handles[i] = c10::Dispatcher::singleton().findSchema({op.name, op.overload == "default" ? "" : op.overload});
    if (!handles[i])
      fail(ErrorKind::Runtime, "operators[" + std::to_string(i) + "]: operator " + op.name + "." + op.overload +
                                   " is not registered in this process; load the library that defines it before loading the program");
  }
  if (!alloc_.empty()) check_aliases(handles);
  for (size_t pc = 0; pc < p.instructions.size(); ++pc) {
    const Instruction& ins = p.instructions[pc];
    Step s;
    s.kind = ins.kind;
    s.a = ins.a;
    s.b = ins.b;
    if (ins.kind == IK::Kernel) {
      const KernelCall& k = ins.k;
      s.outs = k.outs;
      s.prim = prims[size_t(k.op)];
      // out= exactly when every output has a slot (memory.out_calls): the plan's lifetimes
      // assume it, so a call that could not run out= is refused rather than run functionally.
      bool out_variant = opts_.arena && k.out_op >= 0 && !k.outs.empty();
      for (int64_t o : k.outs) out_variant = out_variant && alloc_.count(o);
      if (out_variant && (s.prim || !handles[size_t(k.out_op)]))
        fail(ErrorKind::Format, "native program: instructions[" + std::to_string(pc) + "]: its outputs have arena slots "
                                "but its out= variant is not a torch operator; the file is damaged");
      const c10::FunctionSchema* schema = nullptr;
      if (!s.prim) {
        s.use_out = out_variant;
        s.op = out_variant ? handles[size_t(k.out_op)] : handles[size_t(k.op)];
        schema = &s.op->schema();
      }
      std::vector<const c10::Argument*> params;  // the schema arguments ins.args fill, in order
      if (schema) {
        for (const auto& arg : schema->arguments()) if (!arg.is_out()) params.push_back(&arg);
        if (k.args.size() > params.size())
          fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): " +
                                       std::to_string(k.args.size()) + " arguments for a schema that takes " +
                                       std::to_string(params.size()));
      }
      for (size_t j = 0; j < k.args.size(); ++j) {
        Arg a;
        int64_t i = k.args[j];
        const c10::TypePtr* ty = schema ? &params[j]->type() : nullptr;
        if (!runtime_kind(i)) {
          try {
            a.fixed = ty ? coerce(initial_[size_t(i)], *ty) : initial_[size_t(i)];
          } catch (const std::exception& e) {  // the kind check refused every kind coerce cannot convert: a bug
                                                // here stays a typed error (c10::Error too)
            fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): argument " +
                                         std::to_string(j) + " ('" + params[j]->name() + "') cannot be a " +
                                         initial_[size_t(i)].tagKind() + ": " + e.what());
          }
        } else {
          a.idx = i;
          a.boxed = p.values[size_t(i)].kind == VK::List;
          if (ty) {
            auto kind = (*ty)->kind() == c10::TypeKind::OptionalType
                            ? (*ty)->expectRef<c10::OptionalType>().getElementType()->kind() : (*ty)->kind();
            VK vk = p.values[size_t(i)].kind;
            bool scalar_for_tensor = kind == c10::TypeKind::TensorType && vk != VK::Tensor;
            if (a.boxed || kind == c10::TypeKind::FloatType || kind == c10::TypeKind::ComplexType ||
                kind == c10::TypeKind::ListType || scalar_for_tensor)
              a.type = *ty;
          }
        }
        s.args.push_back(std::move(a));
      }
      if (schema) {  // missing trailing arguments take their schema defaults
        for (size_t j = k.args.size(); j < params.size(); ++j) {
          if (!params[j]->default_value())
            fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): argument '" +
                                         params[j]->name() + "' is missing and has no default");
          Arg a;
          a.fixed = *params[j]->default_value();
          s.args.push_back(std::move(a));
        }
        if (s.use_out) {
          int pos = 0, n_out = 0;
          for (const auto& arg : schema->arguments()) {
            if (arg.is_out()) { s.out_slots.push_back(pos); ++n_out; }
            ++pos;
          }
          if (size_t(n_out) != k.outs.size())
            fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): the out= variant has " +
                                         std::to_string(n_out) + " outputs, the instruction " + std::to_string(k.outs.size()));
          for (int64_t o : k.outs) {
            const Value& m = p.values[size_t(o)];
            bool st = !m.storage_offset.sym;
            for (auto& d : m.sizes) st = st && !d.sym;
            for (auto& d : m.strides) st = st && !d.sym;
            s.out_static.push_back(st);
          }
        }
      }
      s.simple_store = k.outs.size() == 1 && k.outs[0] >= 0 && p.values[size_t(k.outs[0])].kind != VK::List;
      if (!alloc_.empty() && !s.prim && !s.use_out) {
        // Results the operator declares fresh must not be arena memory (the plan reuses it).
        const auto& aliases = p.operators[size_t(k.op)].returns_alias;
        for (size_t j = 0; j < k.outs.size(); ++j) {
          if (k.outs[j] < 0 || (j < aliases.size() && !aliases[j].empty())) continue;
          std::vector<int64_t> w{k.outs[j]};
          while (!w.empty()) {
            int64_t v = w.back();
            w.pop_back();
            const Value& m = p.values[size_t(v)];
            if (m.kind == VK::List) w.insert(w.end(), m.ints.begin(), m.ints.end());
            else if (m.kind == VK::Tensor) s.fresh.push_back(v);
          }
        }
      }
    }
    code_.push_back(std::move(s));
  }
}

namespace {
// A string as Python's repr() shows it, so messages match the Python runtime's.
std::string py_repr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    if (ch == '\\' || ch == q) out += '\\';
    if (ch == '\n') { out += "\\n"; continue; }
    if (ch == '\t') { out += "\\t"; continue; }
    out += ch;
  }
  return out + q;
}
}  // namespace

namespace {
// memory planning's alias sets of one return: the arguments sharing one of its alias sets (a list
// return keeps its set on the element type: then every annotated argument), like kernels.py.
std::set<int64_t> declared_aliases(const c10::FunctionSchema& s, const c10::Argument& r) {
  std::set<int64_t> out;
  const c10::AliasInfo* ri = r.alias_info();
  if (!ri) return out;
  auto sets = [](const c10::AliasInfo* i) {
    std::set<std::string> x;
    if (i) {
      for (const auto& y : i->beforeSets()) x.insert(y.toQualString());
      for (const auto& y : i->afterSets()) x.insert(y.toQualString());
    }
    return x;
  };
  std::set<std::string> rs = sets(ri);
  for (size_t k = 0; k < s.arguments().size(); ++k) {
    std::set<std::string> as = sets(s.arguments()[k].alias_info());
    bool hit = rs.empty() ? !as.empty() : std::any_of(as.begin(), as.end(), [&](const std::string& a) { return rs.count(a) > 0; });
    if (hit) out.insert(int64_t(k));
  }
  return out;
}
}  // namespace

namespace {
// serde.bridge.effects.UNANNOTATED_VIEWS: kernels (every overload) that may return an argument or a
// view of it although their schemas declare fresh results.
const std::set<std::string> kUnannotatedViews = {"aten::_unsafe_view", "aten::unsafe_split",
                                                 "aten::unsafe_split_with_sizes", "aten::unsafe_chunk",
                                                 "aten::dequantize"};
}  // namespace

void Method::check_aliases(const std::vector<std::optional<c10::OperatorHandle>>& handles) const {
  // native.run.runtime._check_aliases: a plan built on fewer aliases than this process's kernels may
  // produce could hand live memory to another tensor. Composite-implicit kernels and those of
  // kUnannotatedViews may return any tensor argument (kernels.actual_aliases).
  const Program& p = lp_.program;
  std::vector<char> called(p.operators.size(), 0);
  for (const Instruction& ins : p.instructions) if (ins.kind == IK::Kernel) called[size_t(ins.k.op)] = 1;
  for (size_t i = 0; i < p.operators.size(); ++i) {
    if (!called[i] || !handles[i]) continue;
    const Operator& op = p.operators[i];
    const c10::FunctionSchema& s = handles[i]->schema();
    bool any_tensor = kUnannotatedViews.count(op.name) ||
                      handles[i]->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    for (size_t j = 0; j < s.returns().size(); ++j) {
      std::set<int64_t> may = declared_aliases(s, s.returns()[j]);
      if (any_tensor && s.returns()[j].real_type()->str().find("Tensor") != std::string::npos)
        for (size_t k = 0; k < s.arguments().size(); ++k)
          if (s.arguments()[k].real_type()->str().find("Tensor") != std::string::npos) may.insert(int64_t(k));
      std::set<int64_t> have;
      if (j < op.returns_alias.size()) have.insert(op.returns_alias[j].begin(), op.returns_alias[j].end());
      if (std::includes(have.begin(), have.end(), may.begin(), may.end())) continue;
      auto list = [](const std::set<int64_t>& x) {
        std::string o = "[";
        for (int64_t v : x) o += (o.size() > 1 ? ", " : "") + std::to_string(v);
        return o + "]";
      };
      fail(ErrorKind::Format, "native program: operators[" + std::to_string(i) + "] (" + op.name + "." + op.overload +
                                  "): return " + std::to_string(j) + " may share storage with arguments " + list(may) +
                                  " in this process's kernels, but the file declares " + list(have) +
                                  "; its memory plan could reuse live memory. Re-emit the program with this torch "
                                  "version, or run it with arena=False");
    }
  }
}

std::string Method::describe(size_t pc) const {
  const Program& p = lp_.program;
  const Instruction& ins = p.instructions[pc];
  std::string what;
  switch (ins.kind) {
    case IK::Kernel: {
      const Operator& op = p.operators[size_t(ins.k.op)];
      what = op.name + "." + op.overload;
      break;
    }
    case IK::Move: what = "MoveCall"; break;
    case IK::JumpFalse: what = "JumpFalseCall"; break;
    case IK::Free: what = "FreeCall"; break;
    case IK::Alloc: what = "AllocCall"; break;
  }
  int64_t h = pc < p.instruction_handles.size() ? p.instruction_handles[pc] : -1;
  if (h < 0) return what;
  const DebugHandle& d = p.debug_handles[size_t(h)];
  return what + ", node " + py_repr(d.node) + (d.module.empty() ? "" : " in module " + py_repr(d.module));
}

std::optional<int64_t> Method::try_eval(int64_t k) {
  if (!expr_done_[size_t(k)]) {
    auto v = evaluate(lp_.program.exprs[size_t(k)], syms_, "e" + std::to_string(k));
    if (!v) return std::nullopt;  // unbacked: not cached, a later symbol binding does not happen in a run
    expr_cache_[size_t(k)] = v;
    expr_done_[size_t(k)] = 1;
  }
  return expr_cache_[size_t(k)];
}

int64_t Method::eval(int64_t k) {
  auto v = try_eval(k);
  if (!v) fail(ErrorKind::Runtime, "size expression e" + std::to_string(k) + " depends on a data-dependent (unbacked) "
                                   "size, which this runtime does not evaluate");
  return *v;
}

void Method::dims(const Value& t, std::vector<int64_t>& sizes, std::vector<int64_t>& strides, int64_t& offset) {
  auto ev = [&](const Dim& d) { return d.sym ? eval(d.v) : d.v; };
  sizes.clear();
  strides.clear();
  for (auto& d : t.sizes) sizes.push_back(ev(d));
  for (auto& d : t.strides) strides.push_back(ev(d));
  offset = ev(t.storage_offset);
}

at::Tensor Method::new_tensor(int64_t value) {
  const Value& t = lp_.program.values[size_t(value)];
  std::vector<int64_t> sizes, strides;
  int64_t offset;
  dims(t, sizes, strides, offset);
  for (int64_t x : sizes) if (x < 0) fail(ErrorKind::Runtime, "value " + std::to_string(value) + " has a negative size");
  for (int64_t x : strides) if (x < 0) fail(ErrorKind::Runtime, "value " + std::to_string(value) + " has a negative stride");
  if (offset < 0) fail(ErrorKind::Runtime, "value " + std::to_string(value) + " has a negative storage offset");
  auto dtype = *to_scalar_type(t.dtype);
  auto it = alloc_.find(value);
  if (it == alloc_.end()) return at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype));
  const Allocation& a = lp_.program.memory_plan.allocations[it->second];
  int64_t isz = int64_t(itemsize(t.dtype));
  __int128 span = 0;
  bool empty = false;
  for (int64_t x : sizes) empty = empty || x == 0;
  if (!empty) {
    span = __int128(offset) + 1;
    for (size_t k = 0; k < sizes.size(); ++k) span += __int128(sizes[k] - 1) * strides[k];
  }
  if (span * isz > a.nbytes)
    fail(ErrorKind::Runtime, "value " + std::to_string(value) + " needs more bytes than its arena slot has (" +
                                 std::to_string(a.nbytes) + "); the program's size bounds are wrong");
  return at::empty({0}, at::TensorOptions().dtype(dtype))
      .set_(arena_.storage(), cur_->offsets[it->second] / isz + offset, sizes, strides);
}

at::Tensor Method::arena_view(int64_t value) {
  // One view per value and plan: a plan is one set of symbol values, so its views never change.
  auto& views = cur_->views;
  auto it = views.find(value);
  if (it != views.end()) return it->second;
  return views[value] = new_tensor(value);
}

bool Method::symbolic(const Value& m) {
  bool sym = m.storage_offset.sym;
  for (auto& d : m.sizes) sym = sym || d.sym;
  for (auto& d : m.strides) sym = sym || d.sym;
  return sym;
}

int64_t Method::span_bytes(int64_t value) {
  const Value& t = lp_.program.values[size_t(value)];
  std::vector<int64_t> sizes, strides;
  int64_t offset;
  dims(t, sizes, strides, offset);
  for (int64_t x : sizes) if (x == 0) return 0;
  __int128 span = __int128(offset) + 1;
  for (size_t k = 0; k < sizes.size(); ++k) span += __int128(sizes[k] - 1) * strides[k];
  span *= int64_t(itemsize(t.dtype));
  return span > INT64_MAX ? INT64_MAX : int64_t(span);
}

void Method::replan() {
  // memory.pack over this run's sizes in the plan's order; when first-fit does worse than the
  // stored plan (it is not monotone), the stored offsets, valid for every allowed size, are kept.
  auto found = plan_index_.find(syms_);
  if (found == plan_index_.end()) {
    const auto& allocs = lp_.program.memory_plan.allocations;
    if (order_.empty()) {
      for (size_t k = 0; k < allocs.size(); ++k) order_.push_back(k);
      std::sort(order_.begin(), order_.end(), [&](size_t x, size_t y) {
        return std::make_tuple(-allocs[x].nbytes, allocs[x].start, allocs[x].value) <
               std::make_tuple(-allocs[y].nbytes, allocs[y].start, allocs[y].value);
      });
    }
    std::vector<PackItem> items;
    for (size_t k : order_) items.push_back({span_bytes(allocs[k].value), allocs[k].start, allocs[k].end});
    auto [offs, size] = pack(items);
    Plan plan;
    if (size > lp_.program.memory_plan.arena_size) {
      plan = plans_[0];
      plan.views.clear();
    } else {
      plan.offsets.assign(allocs.size(), 0);
      for (size_t j = 0; j < order_.size(); ++j) plan.offsets[order_[j]] = offs[j];
      plan.size = size;
    }
    plans_.push_back(std::move(plan));
    found = plan_index_.emplace(syms_, plans_.size() - 1).first;
  }
  cur_ = &plans_[found->second];
  if (cur_->size > arena_.numel()) {
    arena_ = at::empty({cur_->size}, at::TensorOptions().dtype(at::kByte));
    for (Plan& other : plans_) other.views.clear();  // they view the old arena
  }
}

IValue Method::read(const std::vector<IValue>& values, int64_t i) const {
  const Value& v = lp_.program.values[size_t(i)];
  if (v.kind != VK::List) return values[size_t(i)];
  c10::impl::GenericList l(c10::AnyType::get());
  l.reserve(v.ints.size());
  for (int64_t j : v.ints) l.push_back(read(values, j));  // items precede their list: no cycles
  return l;
}

void Method::store(std::vector<IValue>& values, int64_t o, IValue r, size_t pc) {
  if (o == -1) return;
  const Value& meta = lp_.program.values[size_t(o)];
  if (meta.kind == VK::List) {
    if (!r.isList())
      fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): returned a " + r.tagKind() +
                                   " where the program expects a list");
    auto items = r.toListRef();
    if (items.size() != meta.ints.size())
      fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): returned " +
                                   std::to_string(items.size()) + " tensors, the program expects " + std::to_string(meta.ints.size()));
    for (size_t k = 0; k < items.size(); ++k) store(values, meta.ints[k], items[k], pc);
    return;
  }
  values[size_t(o)] = std::move(r);
}

void Method::bind(std::vector<IValue>& values, const std::vector<IValue>& leaves) {
  const Program& p = lp_.program;
  if (leaves.size() != p.inputs.size()) {
    std::string names;
    for (size_t i = 0; i < p.inputs.size(); ++i) names += (i ? ", " : "") + p.inputs[i].name;
    fail(ErrorKind::InputMismatch, "the program takes " + std::to_string(p.inputs.size()) + " inputs (" + names + "), got " +
                                       std::to_string(leaves.size()));
  }
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    const Input& in = p.inputs[k];
    const IValue& leaf = leaves[k];
    const Value& meta = p.values[size_t(in.value)];
    std::string name = "input '" + in.name + "'";
    if (in.constant) {
      const IValue& want = values[size_t(in.value)];
      bool same = leaf.tagKind() == want.tagKind();
      if (same) {
        if (leaf.isInt()) same = leaf.toInt() == want.toInt();
        else if (leaf.isDouble()) same = leaf.toDouble() == want.toDouble();
        else if (leaf.isBool()) same = leaf.toBool() == want.toBool();
        else if (leaf.isString()) same = leaf.toStringRef() == want.toStringRef();
        else if (!leaf.isNone()) same = false;
      }
      if (!same)
        fail(ErrorKind::InputMismatch, name + ": the program was exported for the constant " + c10::str(want) +
                                           ", got " + c10::str(leaf) + "; re-export to use another value");
      continue;
    }
    if (meta.kind == VK::Tensor) {
      if (!leaf.isTensor()) fail(ErrorKind::InputMismatch, name + ": expected a tensor, got " + leaf.tagKind());
      const at::Tensor& t = leaf.toTensor();
      if (t.scalar_type() != *to_scalar_type(meta.dtype))
        fail(ErrorKind::InputMismatch, name + ": expected dtype " + std::string(c10::toString(*to_scalar_type(meta.dtype))) +
                                           ", got " + c10::toString(t.scalar_type()));
      if (size_t(t.dim()) != meta.sizes.size())
        fail(ErrorKind::InputMismatch, name + ": expected " + std::to_string(meta.sizes.size()) + " dimensions, got " +
                                           std::to_string(t.dim()) + " (sizes " + c10::str(t.sizes()) + ")");
    } else if (meta.kind == VK::SymInt && !leaf.isInt()) {
      fail(ErrorKind::InputMismatch, name + ": expected an int, got " + leaf.tagKind());
    } else if (meta.kind == VK::SymBool && !leaf.isBool()) {
      fail(ErrorKind::InputMismatch, name + ": expected a bool, got " + leaf.tagKind());
    } else if (meta.kind == VK::SymFloat && !leaf.isInt() && !leaf.isDouble() && !leaf.isBool()) {
      fail(ErrorKind::InputMismatch, name + ": expected a float, got " + leaf.tagKind());
    }
    values[size_t(in.value)] = leaf;
  }
  syms_.assign(p.symbols.size(), std::nullopt);
  for (size_t k = 0; k < p.symbols.size(); ++k) {
    const Symbol& s = p.symbols[k];
    if (s.input < 0) continue;
    const Input& in = p.inputs[size_t(s.input)];
    const IValue& leaf = leaves[size_t(s.input)];
    std::string what = "input '" + in.name + "'" + (s.dim >= 0 ? " dimension " + std::to_string(s.dim) : "");
    int64_t raw;
    if (s.dim < 0) {
      if (leaf.isInt()) raw = leaf.toInt();
      else if (leaf.isBool()) raw = leaf.toBool();
      else fail(ErrorKind::InputMismatch, what + ": expected an int, got " + leaf.tagKind());
    } else {
      if (!leaf.isTensor() || leaf.toTensor().dim() <= s.dim)
        fail(ErrorKind::InputMismatch, what + ": the input has no such dimension");
      raw = leaf.toTensor().size(s.dim);
    }
    int64_t diff;
    if (__builtin_sub_overflow(raw, s.offset, &diff))
      fail(ErrorKind::InputMismatch, what + " is " + std::to_string(raw) + ", out of range");
    int64_t v = diff / s.scale, r = diff % s.scale;
    if (r < 0) { r += s.scale; --v; }
    if (r || v < 0)
      fail(ErrorKind::InputMismatch, what + " is " + std::to_string(raw) + ", which is not " + std::to_string(s.scale) + "*" +
                                         s.name + " + " + std::to_string(s.offset) + " for any natural " + s.name);
    if ((s.min && v < *s.min) || (s.max && v > *s.max))
      fail(ErrorKind::InputMismatch, what + " is " + std::to_string(raw) + ", so " + s.name + " = " + std::to_string(v) +
                                         ", outside its allowed range [" + (s.min ? std::to_string(*s.min) : "None") + ", " +
                                         (s.max ? std::to_string(*s.max) : "inf") + "]");
    syms_[k] = v;
  }
  expr_cache_.assign(p.exprs.size(), std::nullopt);
  expr_done_.assign(p.exprs.size(), 0);
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    const Input& in = p.inputs[k];
    const Value& t = p.values[size_t(in.value)];
    if (in.constant || t.kind != VK::Tensor) continue;
    const at::Tensor& leaf = leaves[k].toTensor();
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      int64_t want = t.sizes[d].v;
      if (t.sizes[d].sym) {
        auto w = try_eval(t.sizes[d].v);
        if (!w) fail(ErrorKind::Runtime, "input '" + in.name + "': dimension " + std::to_string(d) +
                                             " depends on a symbol no input binds; the program is malformed");
        want = *w;
      }
      if (leaf.size(int64_t(d)) != want)
        fail(ErrorKind::InputMismatch, "input '" + in.name + "': dimension " + std::to_string(d) + " is " +
                                           std::to_string(leaf.size(int64_t(d))) + " but the program requires " +
                                           std::to_string(want) + " (sizes " + c10::str(leaf.sizes()) + ")");
    }
  }
  for (size_t k = 0; k < p.guards.size(); ++k) {
    auto ok = try_eval(p.guards[k]);
    if (!ok) fail(ErrorKind::Runtime, "guard " + p.guard_texts[k] + " depends on a symbol no input binds; the program is malformed");
    if (!*ok) fail(ErrorKind::InputMismatch, "the inputs fail the export guard " + p.guard_texts[k]);
  }
}

namespace {
[[noreturn]] void fail_at(size_t pc, const std::string& msg) {
  Error e(ErrorKind::Runtime, msg);
  e.instruction = int64_t(pc);
  throw e;
}
}  // namespace

std::vector<IValue> Method::run_flat(std::vector<IValue> leaves) {
  const Program& p = lp_.program;
  std::vector<IValue> values(initial_);
  bind(values, leaves);
  if (dynamic_plan_) replan();
  using clock = std::chrono::steady_clock;
  c10::AutoGradMode no_grad(false);
  // As no_grad, and cheaper: kernels dispatch straight past the autograd layer (nothing here
  // records a graph); view and version tracking (ADInplaceOrView) still run.
  at::AutoDispatchBelowAutograd below_autograd;
  int64_t budget = opts_.max_loop_instructions;
  size_t pc = 0, n = code_.size();
  auto& stack = stack_;
  try {
    while (pc < n) {
      Step& s = code_[pc];
      const size_t pc0 = pc;
      clock::time_point t0;
      if (timings_) t0 = clock::now();
      switch (s.kind) {
        case IK::Kernel: {
          stack.clear();
          for (const Arg& a : s.args) {
            if (a.idx < 0) stack.push_back(a.fixed);
            else if (!a.boxed && !a.type) stack.push_back(values[size_t(a.idx)]);
            else {
              IValue v = a.boxed ? read(values, a.idx) : values[size_t(a.idx)];
              stack.push_back(a.type ? coerce(v, a.type) : std::move(v));
            }
          }
          if (s.prim) {
            IValue r = s.prim(stack);
            if (s.outs.size() == 1) store(values, s.outs[0], std::move(r), pc);
            else if (!s.outs.empty()) fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): a symbolic op has one result");
            ++pc;
            break;
          }
          if (s.use_out) {
            for (size_t k = 0; k < s.out_slots.size(); ++k)
              stack.insert(stack.begin() + s.out_slots[k], IValue(arena_view(s.outs[k])));
          }
          if (kernel_time_) {
            auto t0 = std::chrono::steady_clock::now();
            s.op->callBoxed(stack);
            *kernel_time_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          } else {
            s.op->callBoxed(stack);
          }
          if (s.simple_store && stack.size() == 1) {
            values[size_t(s.outs[0])] = std::move(stack[0]);
          } else if (!s.outs.empty()) {
            if (s.outs.size() == 1) {
              IValue r = stack.size() == 1 ? std::move(stack[0]) : IValue(c10::ivalue::Tuple::create(stack));
              store(values, s.outs[0], std::move(r), pc);
            } else {
              if (stack.size() != s.outs.size())
                fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): returned " +
                                             std::to_string(stack.size()) + " values for " + std::to_string(s.outs.size()) + " outputs");
              for (size_t k = 0; k < s.outs.size(); ++k) store(values, s.outs[k], std::move(stack[k]), pc);
            }
          }
          if (s.use_out) check_results(values, s, pc);
          else if (!s.fresh.empty()) check_fresh(values, s, pc);
          ++pc;
          break;
        }
        case IK::Move:
          values[size_t(s.b)] = read(values, s.a);
          ++pc;
          break;
        case IK::JumpFalse: {
          bool always = is_unconditional(p, p.instructions[pc]);
          bool go = always || !truthy(read(values, s.a));
          if (!go) { ++pc; break; }
          if (size_t(s.b) <= pc) {
            // A backward jump closes one iteration of the loop [target, pc] and is charged that
            // loop's length: the budget bounds the instructions run in loops, whatever a body holds.
            const int64_t cost = int64_t(pc) - s.b + 1;
            if (budget >= 0) {
              if (budget < cost)
                fail(ErrorKind::Runtime, "instruction " + std::to_string(pc) + ": loops ran more than " +
                                             std::to_string(opts_.max_loop_instructions) + " instructions in this run; a loop's "
                                             "condition may never become false. Pass max_loop_instructions=N (None: no limit) if "
                                             "the program really runs that long");
              budget -= cost;
            }
          }
          pc = size_t(s.b);
          break;
        }
        case IK::Free:
          values[size_t(s.a)] = IValue();
          ++pc;
          break;
        case IK::Alloc:
          values[size_t(s.a)] = new_tensor(s.a);
          ++pc;
          break;
      }
      if (timings_)
        timings_->emplace_back(int64_t(pc0),
                               std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count());
    }
  } catch (Error& e) {
    if (e.kind == ErrorKind::Runtime && std::string(e.what()).rfind("instruction ", 0) != 0)
      fail_at(pc, "instruction " + std::to_string(pc) + " (" + describe(pc) + ") failed: " + e.what());
    if (e.instruction < 0) e.instruction = int64_t(pc);
    throw;
  } catch (const c10::Error& e) {
    fail_at(pc, "instruction " + std::to_string(pc) + " (" + describe(pc) + ") failed: RuntimeError: " +
                    e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail_at(pc, "instruction " + std::to_string(pc) + " (" + describe(pc) + ") failed: " + e.what());
  }
  std::vector<IValue> outs;
  outs.reserve(p.outputs.size());
  for (int64_t o : p.outputs) outs.push_back(values[size_t(o)]);
  return outs;
}

void Method::check_fresh(const std::vector<IValue>& values, const Step& s, size_t pc) const {
  const auto* lo = static_cast<const uint8_t*>(arena_.data_ptr());
  const auto* hi = lo + arena_.numel();
  for (int64_t o : s.fresh) {
    const IValue& v = values[size_t(o)];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !t.numel()) continue;
    const auto* ptr = static_cast<const uint8_t*>(t.data_ptr());
    if (lo <= ptr && ptr < hi)
      fail(ErrorKind::ArenaAlias, "instruction " + std::to_string(pc) + " (" + describe(pc) + "): the kernel returned "
                                  "arena memory (value " + std::to_string(o) + ") although its operator declares a fresh "
                                  "result; the plan would reuse that memory while the value is alive. Run with arena=False");
  }
}

namespace {
// The end of a planned result's message (runtime.py _UNDECLARED).
constexpr const char* kUndeclared = "; in arena mode every planned result must be what the program declares, so the "
                                    "file is damaged or was not written by pt2serde";

std::string py_list(c10::IntArrayRef xs) {  // as Python prints a list of ints: [4, 6]
  std::string out = "[";
  for (size_t k = 0; k < xs.size(); ++k) out += (k ? ", " : "") + std::to_string(xs[k]);
  return out + "]";
}

std::string py_dtype(c10::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }
}  // namespace

// runtime.py Method._check_results: a planned call's results have their declared dtypes and sizes
// (same order, same messages); an out= kernel that resized its slot's view (over its neighbours'
// slots) gets the view's declared shape back before the run stops.
void Method::check_results(const std::vector<IValue>& values, const Step& s, size_t pc) {
  const Program& p = lp_.program;
  for (int64_t o : s.outs) {
    const IValue& v = values[size_t(o)];
    auto where = [&] { return "instruction " + std::to_string(pc) + " (" + describe(pc) + "): "; };
    if (!v.isTensor()) fail(ErrorKind::Runtime, where() + "returned no tensor for value " + std::to_string(o) + kUndeclared);
    const at::Tensor& t = v.toTensor();
    const Value& meta = p.values[size_t(o)];
    const c10::ScalarType want = *to_scalar_type(meta.dtype);
    if (t.scalar_type() != want)
      fail(ErrorKind::Runtime, where() + "value " + std::to_string(o) + " has dtype " + py_dtype(t.scalar_type()) +
                                   ", declared " + py_dtype(want) + kUndeclared);
    // Fixed sizes are compared in place; a size that depends on data (unbacked) is not compared.
    const c10::IntArrayRef got = t.sizes();
    bool same = got.size() == meta.sizes.size();
    for (size_t d = 0; d < meta.sizes.size(); ++d) {
      const Dim& dim = meta.sizes[d];
      std::optional<int64_t> n = dim.sym ? try_eval(dim.v) : std::optional<int64_t>(dim.v);
      if (!n) { same = true; break; }
      same = same && got[d] == *n;
    }
    if (same) continue;
    std::vector<int64_t> sizes, strides;
    int64_t offset;
    dims(meta, sizes, strides, offset);
    const std::string had = py_list(got);
    auto it = cur_->views.find(o);
    if (it != cur_->views.end() && it->second.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) t.as_strided_(sizes, strides);
    fail(ErrorKind::Runtime, where() + "value " + std::to_string(o) + " has sizes " + had + ", declared " +
                                 py_list(sizes) + kUndeclared);
  }
}

std::vector<IValue> Method::run_profiled(std::vector<IValue> leaves, std::vector<std::pair<int64_t, int64_t>>& timings) {
  timings_ = &timings;
  try {
    auto out = run_flat(std::move(leaves));
    timings_ = nullptr;
    return out;
  } catch (...) {
    timings_ = nullptr;
    throw;
  }
}

std::pair<double, double> Method::kernel_floor(std::vector<IValue> leaves, int repeats) {
  using clock = std::chrono::steady_clock;
  double best_run = 1e300, best_kernels = 0;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    double kernels = 0;
    kernel_time_ = &kernels;
    auto t0 = clock::now();
    try {
      run_flat(leaves);
    } catch (...) {
      kernel_time_ = nullptr;
      throw;
    }
    double run = std::chrono::duration<double>(clock::now() - t0).count();
    kernel_time_ = nullptr;
    if (run < best_run) { best_run = run; best_kernels = kernels; }
  }
  return {best_run, best_kernels};
}

}  // namespace pt2n
