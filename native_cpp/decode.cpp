// The msgpack header -> Program (src/native/format/program.py's msgspec Structs).
//
// Program is a map, read by key: unknown keys are ignored (a newer minor format may add
// fields) and missing optional keys take their defaults. Every other struct is an array
// ("array_like"); trailing fields with defaults may be absent and extra trailing fields are
// ignored, as msgspec does. Unpack limits bound every container by the header's length, so a
// hostile length prefix cannot make the decoder allocate more than the file could hold.
#include <msgpack.hpp>

#include <set>

#include "program.h"

namespace pt2n {

namespace {
using msgpack::object;
namespace T = msgpack::type;

struct Ctx {
  const std::string& what;
  [[noreturn]] void bad(const std::string& where, const std::string& msg) const {
    fail(ErrorKind::Format, what + ": the header does not match the program schema: " + msg + " - at `$." + where + "`");
  }
};

bool valid_utf8(const char* s, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || i + len > n) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

int64_t as_int(const Ctx& c, const object& o, const std::string& w) {
  if (o.type == T::POSITIVE_INTEGER) {
    if (o.via.u64 > uint64_t(INT64_MAX)) c.bad(w, "an integer larger than int64");
    return int64_t(o.via.u64);
  }
  if (o.type == T::NEGATIVE_INTEGER) return o.via.i64;
  c.bad(w, "Expected `int`");
}
double as_float(const Ctx& c, const object& o, const std::string& w) {
  if (o.type == T::FLOAT32 || o.type == T::FLOAT64) return o.via.f64;
  if (o.type == T::POSITIVE_INTEGER || o.type == T::NEGATIVE_INTEGER) return double(as_int(c, o, w));
  c.bad(w, "Expected `float`");
}
bool as_bool(const Ctx& c, const object& o, const std::string& w) {
  if (o.type != T::BOOLEAN) c.bad(w, "Expected `bool`");
  return o.via.boolean;
}
std::string as_str(const Ctx& c, const object& o, const std::string& w) {
  if (o.type != T::STR) c.bad(w, "Expected `str`");
  if (!valid_utf8(o.via.str.ptr, o.via.str.size)) c.bad(w, "a string that is not UTF-8");
  return std::string(o.via.str.ptr, o.via.str.size);
}
const msgpack::object_array& as_arr(const Ctx& c, const object& o, const std::string& w) {
  if (o.type != T::ARRAY) c.bad(w, "Expected `array`");
  return o.via.array;
}
template <class F>
auto list_of(const Ctx& c, const object& o, const std::string& w, F f) {
  const auto& a = as_arr(c, o, w);
  std::vector<decltype(f(a.ptr[0], w))> out;
  out.reserve(a.size);
  for (uint32_t i = 0; i < a.size; ++i) out.push_back(f(a.ptr[i], w + "[" + std::to_string(i) + "]"));
  return out;
}
std::vector<int64_t> ints(const Ctx& c, const object& o, const std::string& w) {
  return list_of(c, o, w, [&](const object& x, const std::string& ww) { return as_int(c, x, ww); });
}

// A positional struct: `need` required fields, at most `max` read.
struct Fields {
  const Ctx& c; const msgpack::object_array& a; std::string w; uint32_t base;
  Fields(const Ctx& c_, const object& o, const std::string& w_, uint32_t need, uint32_t base_ = 0)
      : c(c_), a(as_arr(c_, o, w_)), w(w_), base(base_) {
    if (a.size < base + need)
      c.bad(w, "Expected `array` of length >= " + std::to_string(base + need) + ", got " + std::to_string(a.size));
  }
  bool has(uint32_t i) const { return base + i < a.size; }
  const object& operator[](uint32_t i) const { return a.ptr[base + i]; }
  std::string at(uint32_t i) const { return w + "[" + std::to_string(base + i) + "]"; }
};

Dim dim(const Ctx& c, const object& o, const std::string& w) {
  if (o.type == T::ARRAY) {
    Fields f(c, o, w, 2);
    if (as_str(c, f[0], f.at(0)) != "sym") c.bad(w, "Expected `int | Sym`");
    return Dim{true, as_int(c, f[1], f.at(1))};
  }
  return Dim{false, as_int(c, o, w)};
}

Value value(const Ctx& c, const object& o, const std::string& w) {
  Fields f(c, o, w, 1);
  std::string tag = as_str(c, f[0], f.at(0));
  Fields g(c, o, w, 0, 1);  // the fields after the tag
  auto need = [&](uint32_t n) { if (!g.has(n - 1)) c.bad(w, "Expected `array` of length >= " + std::to_string(n + 1)); };
  Value v;
  if (tag == "none") { v.kind = VK::None; }
  else if (tag == "int") { need(1); v.kind = VK::Int; v.i = as_int(c, g[0], g.at(0)); }
  else if (tag == "float") { need(1); v.kind = VK::Float; v.f = as_float(c, g[0], g.at(0)); }
  else if (tag == "bool") { need(1); v.kind = VK::Bool; v.i = as_bool(c, g[0], g.at(0)); }
  else if (tag == "str") { need(1); v.kind = VK::String; v.s = as_str(c, g[0], g.at(0)); }
  else if (tag == "ints") { need(1); v.kind = VK::IntList; v.ints = ints(c, g[0], g.at(0)); }
  else if (tag == "floats") {
    need(1); v.kind = VK::FloatList;
    v.floats = list_of(c, g[0], g.at(0), [&](const object& x, const std::string& ww) { return as_float(c, x, ww); });
  } else if (tag == "bools") {
    need(1); v.kind = VK::BoolList;
    v.ints = list_of(c, g[0], g.at(0), [&](const object& x, const std::string& ww) { return int64_t(as_bool(c, x, ww)); });
  } else if (tag == "strs") {
    need(1); v.kind = VK::StringList;
    v.strs = list_of(c, g[0], g.at(0), [&](const object& x, const std::string& ww) { return as_str(c, x, ww); });
  } else if (tag == "complex") {
    need(2); v.kind = VK::Complex; v.f = as_float(c, g[0], g.at(0)); v.imag = as_float(c, g[1], g.at(1));
  } else if (tag == "dtype" || tag == "layout" || tag == "memory_format") {
    need(1);
    v.kind = tag == "dtype" ? VK::ScalarType : tag == "layout" ? VK::Layout : VK::MemoryFormat;
    v.i = as_int(c, g[0], g.at(0));
  } else if (tag == "device") {
    need(1); v.kind = VK::Device; v.s = as_str(c, g[0], g.at(0)); v.i = -1;
    if (g.has(1) && g[1].type != T::NIL) {
      v.i = as_int(c, g[1], g.at(1));
      if (v.i < 0) c.bad(g.at(1), "a negative device index");
    }
  } else if (tag == "tensor") {
    need(3); v.kind = VK::Tensor;
    v.dtype = as_int(c, g[0], g.at(0));
    v.sizes = list_of(c, g[1], g.at(1), [&](const object& x, const std::string& ww) { return dim(c, x, ww); });
    v.strides = list_of(c, g[2], g.at(2), [&](const object& x, const std::string& ww) { return dim(c, x, ww); });
    if (g.has(3)) v.storage_offset = dim(c, g[3], g.at(3));
    if (g.has(4)) v.data = as_int(c, g[4], g.at(4));
  } else if (tag == "list") { need(1); v.kind = VK::List; v.ints = ints(c, g[0], g.at(0)); }
  else if (tag == "symint" || tag == "symbool") {
    v.kind = tag == "symint" ? VK::SymInt : VK::SymBool;
    v.i = g.has(0) ? as_int(c, g[0], g.at(0)) : -1;
  } else if (tag == "symfloat") { v.kind = VK::SymFloat; }
  else c.bad(f.at(0), "Invalid value '" + tag + "'");
  return v;
}

Instruction instruction(const Ctx& c, const object& o, const std::string& w) {
  Fields f(c, o, w, 1);
  std::string tag = as_str(c, f[0], f.at(0));
  Fields g(c, o, w, 0, 1);
  auto need = [&](uint32_t n) { if (!g.has(n - 1)) c.bad(w, "Expected `array` of length >= " + std::to_string(n + 1)); };
  Instruction ins{};
  if (tag == "kernel") {
    need(3); ins.kind = IK::Kernel;
    ins.k.op = as_int(c, g[0], g.at(0));
    ins.k.args = ints(c, g[1], g.at(1));
    ins.k.outs = ints(c, g[2], g.at(2));
    if (g.has(3)) ins.k.out_op = as_int(c, g[3], g.at(3));
  } else if (tag == "move" || tag == "jump_false") {
    need(2); ins.kind = tag == "move" ? IK::Move : IK::JumpFalse;
    ins.a = as_int(c, g[0], g.at(0));
    ins.b = as_int(c, g[1], g.at(1));
  } else if (tag == "free" || tag == "alloc") {
    need(1); ins.kind = tag == "free" ? IK::Free : IK::Alloc;
    ins.a = as_int(c, g[0], g.at(0));
  } else c.bad(f.at(0), "Invalid value '" + tag + "'");
  return ins;
}

std::optional<int64_t> opt_int(const Ctx& c, const object& o, const std::string& w) {
  if (o.type == T::NIL) return std::nullopt;
  return as_int(c, o, w);
}

std::optional<std::string> opt_str(const Ctx& c, const object& o, const std::string& w) {
  if (o.type == T::NIL) return std::nullopt;
  return as_str(c, o, w);
}

void program_field(const Ctx& c, Program& p, const std::string& key, const object& v) {
  const std::string& w = key;
  auto L = [&](auto f) { return list_of(c, v, w, f); };
  if (key == "values") p.values = L([&](const object& x, const std::string& ww) { return value(c, x, ww); });
  else if (key == "operators") p.operators = L([&](const object& x, const std::string& ww) {
    Fields f(c, x, ww, 2);
    Operator op{as_str(c, f[0], f.at(0)), as_str(c, f[1], f.at(1)), {}};
    if (f.has(2)) op.returns_alias = list_of(c, f[2], f.at(2), [&](const object& y, const std::string& w3) { return ints(c, y, w3); });
    return op;
  });
  else if (key == "instructions") p.instructions = L([&](const object& x, const std::string& ww) { return instruction(c, x, ww); });
  else if (key == "exprs") p.exprs = L([&](const object& x, const std::string& ww) { return ints(c, x, ww); });
  else if (key == "symbols") p.symbols = L([&](const object& x, const std::string& ww) {
    Fields f(c, x, ww, 3);
    Symbol s;
    s.name = as_str(c, f[0], f.at(0));
    s.input = as_int(c, f[1], f.at(1));
    s.dim = as_int(c, f[2], f.at(2));
    if (f.has(3)) s.scale = as_int(c, f[3], f.at(3));
    if (f.has(4)) s.offset = as_int(c, f[4], f.at(4));
    if (f.has(5)) s.min = opt_int(c, f[5], f.at(5));
    if (f.has(6)) s.max = opt_int(c, f[6], f.at(6));
    return s;
  });
  else if (key == "constants") p.constants = L([&](const object& x, const std::string& ww) {
    Fields f(c, x, ww, 3);
    return Constant{as_str(c, f[0], f.at(0)), as_int(c, f[1], f.at(1)), as_int(c, f[2], f.at(2))};
  });
  else if (key == "inputs") p.inputs = L([&](const object& x, const std::string& ww) {
    Fields f(c, x, ww, 2);
    Input in{as_str(c, f[0], f.at(0)), as_int(c, f[1], f.at(1))};
    if (f.has(2)) in.constant = as_bool(c, f[2], f.at(2));
    return in;
  });
  else if (key == "outputs") p.outputs = ints(c, v, w);
  else if (key == "state") p.state = L([&](const object& x, const std::string& ww) {
    Fields f(c, x, ww, 3);
    State s{as_str(c, f[0], f.at(0)), as_str(c, f[1], f.at(1)), as_int(c, f[2], f.at(2))};
    if (f.has(3)) s.mutable_ = as_bool(c, f[3], f.at(3));
    return s;
  });
  else if (key == "memory_plan") {
    Fields f(c, v, w, 0);
    MemoryPlan& mp = p.memory_plan;
    if (f.has(0)) mp.arena_size = as_int(c, f[0], f.at(0));
    if (f.has(1)) mp.naive_size = as_int(c, f[1], f.at(1));
    if (f.has(2)) mp.allocations = list_of(c, f[2], f.at(2), [&](const object& x, const std::string& ww) {
      Fields a(c, x, ww, 3);
      Allocation al{as_int(c, a[0], a.at(0)), as_int(c, a[1], a.at(1)), as_int(c, a[2], a.at(2))};
      if (a.has(3)) al.start = as_int(c, a[3], a.at(3));
      if (a.has(4)) al.end = as_int(c, a[4], a.at(4));
      return al;
    });
    if (f.has(3)) mp.unplanned = as_int(c, f[3], f.at(3));
  } else if (key == "in_spec") p.in_spec = opt_str(c, v, w);
  else if (key == "out_spec") p.out_spec = opt_str(c, v, w);
  else if (key == "guards") p.guards = ints(c, v, w);
  else if (key == "guard_texts") p.guard_texts = L([&](const object& x, const std::string& ww) { return as_str(c, x, ww); });
  else if (key == "torch_version") p.torch_version = as_str(c, v, w);
  else if (key == "debug_handles") p.debug_handles = L([&](const object& x, const std::string& ww) {
    Fields f(c, x, ww, 2);
    DebugHandle h{as_str(c, f[0], f.at(0)), as_str(c, f[1], f.at(1)), ""};
    if (f.has(2)) h.module = as_str(c, f[2], f.at(2));
    return h;
  });
  else if (key == "instruction_handles") p.instruction_handles = ints(c, v, w);
  else if (key == "input_keys") p.input_keys = L([&](const object& x, const std::string& ww) { return as_str(c, x, ww); });
  else if (key == "output_keys") p.output_keys = L([&](const object& x, const std::string& ww) { return as_str(c, x, ww); });
  // any other key: a field of a newer minor format, ignored
}
}  // namespace

Program decode_header(const uint8_t* data, size_t n, const std::string& what) {
  Ctx c{what};
  // Each element takes at least one byte, so no container can hold more than n of them.
  uint32_t cap = uint32_t(std::min<size_t>(n, 0xffffffffu));
  msgpack::unpack_limit limit(cap, cap / 2 + 1, cap, cap, 0, 64);
  msgpack::object_handle oh;
  try {
    std::size_t off = 0;
    oh = msgpack::unpack(reinterpret_cast<const char*>(data), n, off, nullptr, nullptr, limit);
    if (off != n) fail(ErrorKind::Format, what + ": the header does not match the program schema: trailing bytes after the header");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorKind::Format, what + ": the header does not match the program schema: " + e.what());
  }
  const object& root = oh.get();
  if (root.type != T::MAP) c.bad("", "Expected `object`");
  Program p;
  static const char* required[] = {"values", "operators", "instructions", "exprs", "symbols", "constants", "inputs",
                                   "outputs", "state"};
  std::set<std::string> seen;
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    std::string key = as_str(c, kv.key, "<key>");
    if (!seen.insert(key).second) c.bad(key, "a duplicated field");
    program_field(c, p, key, kv.val);
  }
  for (const char* r : required)
    if (!seen.count(r)) c.bad("", std::string("Object missing required field `") + r + "`");
  return p;
}

}  // namespace pt2n
