// The embedding API (include/pt2n/runtime.h) over Method, and safetensors files for inputs and
// outputs: the keys and messages of src/native/run/io.py.
#include "pt2n/runtime.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <dlfcn.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

#include "method.h"

namespace pt2n {
namespace {

const char* kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Format: return "NativeFormatError";
    case ErrorKind::Version: return "NativeVersionError";
    case ErrorKind::ArenaTooLarge: return "ArenaTooLargeError";
    case ErrorKind::InputMismatch: return "InputMismatchError";
    case ErrorKind::Runtime: return "NativeRuntimeError";
    case ErrorKind::ArenaAlias: return "ArenaAliasError";
    case ErrorKind::FlowTooLarge: return "FlowTooLargeError";
  }
  return "Error";
}

[[noreturn]] void mismatch(const std::string& msg) { throw RunError("InputMismatchError", msg); }
[[noreturn]] void bad_file(const std::string& where, const std::string& msg) {
  throw RunError("InvalidWeightsFileError",
                 where + ": " + msg + "; it is not a valid safetensors file (damaged or hostile)");
}

// safetensors dtype names (serde.archive.safetensors.DTYPE_NAMES) <-> c10.
const std::vector<std::pair<std::string, c10::ScalarType>>& dtypes() {
  static const std::vector<std::pair<std::string, c10::ScalarType>> t = {
      {"BOOL", at::kBool}, {"U8", at::kByte}, {"I8", at::kChar}, {"I16", at::kShort}, {"U16", at::kUInt16},
      {"I32", at::kInt}, {"U32", at::kUInt32}, {"I64", at::kLong}, {"U64", at::kUInt64}, {"F16", at::kHalf},
      {"BF16", at::kBFloat16}, {"F32", at::kFloat}, {"F64", at::kDouble}, {"C64", at::kComplexFloat},
      {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2}, {"F8_E4M3FNUZ", at::kFloat8_e4m3fnuz},
      {"F8_E5M2FNUZ", at::kFloat8_e5m2fnuz}};
  return t;
}

// The parser's messages quote the bytes it stopped at, which may be anything: escaped, so an error
// line is always printable ASCII.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch >= 0x20 && ch < 0x7f) {
      out += char(ch);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    }
  }
  return out;
}

// At most n bytes of a valid UTF-8 key, cut at a character boundary (keys are quoted in messages).
std::string head_of(const std::string& key, size_t n = 80) {
  if (key.size() <= n) return key;
  while (n > 0 && (static_cast<unsigned char>(key[n]) & 0xC0) == 0x80) --n;
  return key.substr(0, n);
}

constexpr uint64_t kMaxSafetensorsHeader = uint64_t(100) << 20;  // as the safetensors library
constexpr size_t kMaxRank = 64, kMaxKey = 1024;

std::vector<uint8_t> read_all(const std::string& path, const std::string& what) {
  errno = 0;
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::streamoff n = f ? std::streamoff(f.tellg()) : -1;
  std::vector<uint8_t> buf(size_t(std::max<std::streamoff>(n, 0)));
  if (n < 0 || !f.seekg(0) || !f.read(reinterpret_cast<char*>(buf.data()), n))
    throw RunError("MalformedArtifactError", path + ": cannot read the " + what + ": " +
                                                 (errno ? std::strerror(errno) : "read failed"));
  return buf;
}

// The tensors of a safetensors file, after the checks of serde.archive.safetensors.parse_header:
// a bounded header, JSON data only, exact entries, offsets covering the data without gap or overlap.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  std::vector<uint8_t> buf = read_all(path, "inputs file");
  uint64_t size = buf.size();
  if (size < 8) bad_file(path, std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | buf[size_t(i)];
  if (n > kMaxSafetensorsHeader)
    bad_file(path, "the header declares " + std::to_string(n) + " bytes, more than the " +
                       std::to_string(kMaxSafetensorsHeader) + " allowed");
  if (8 + n > size)
    bad_file(path, "the header declares " + std::to_string(n) + " bytes but the file has " + std::to_string(size) +
                       " (truncated?)");
  // Entries nest two levels; deeper input is refused while parsing, so nothing deep is built.
  nlohmann::json::parser_callback_t shallow = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > 3) throw std::out_of_range("nested too deep");
    return true;
  };
  nlohmann::json head;
  try {
    head = nlohmann::json::parse(buf.begin() + 8, buf.begin() + 8 + int64_t(n), shallow);
  } catch (const std::exception& e) {
    bad_file(path, "the header is not JSON (" + printable(e.what()) + ")");
  }
  if (!head.is_object()) bad_file(path, "the header is not a JSON object");
  uint64_t data_start = 8 + n, data = size - data_start;
  struct Entry { std::string key; c10::ScalarType dtype; std::vector<int64_t> shape; uint64_t begin, end; };
  std::vector<Entry> entries;
  auto uint_ok = [](const nlohmann::json& v) {
    return v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX);
  };
  for (auto it = head.begin(); it != head.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& info = it.value();
    if (key == "__metadata__") {
      if (info.is_null()) continue;
      if (!info.is_object()) bad_file(path, "__metadata__ is not an object of strings");
      for (const auto& m : info)
        if (!m.is_string()) bad_file(path, "__metadata__ is not an object of strings");
      continue;
    }
    std::string at = "tensor '" + head_of(key) + "'";
    if (key.size() > kMaxKey) bad_file(path, at + ": a key of " + std::to_string(key.size()) + " characters");
    if (!info.is_object() || info.size() != 3 || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      bad_file(path, at + ": expected exactly dtype, shape and data_offsets");
    const auto& dt = info["dtype"];
    const auto& shape = info["shape"];
    const auto& offs = info["data_offsets"];
    std::optional<c10::ScalarType> st;
    if (dt.is_string())
      for (const auto& [name, s] : dtypes())
        if (name == dt.get<std::string>()) st = s;
    if (!st) bad_file(path, at + ": dtype " + printable(dt.dump().substr(0, 20)) + " is not one pt2serde reads");
    if (!shape.is_array() || shape.size() > kMaxRank || !std::all_of(shape.begin(), shape.end(), uint_ok))
      bad_file(path, at + ": shape must be at most " + std::to_string(kMaxRank) + " non-negative integers");
    if (!offs.is_array() || offs.size() != 2 || !uint_ok(offs[0]) || !uint_ok(offs[1]) ||
        offs[0].get<uint64_t>() > offs[1].get<uint64_t>() || offs[1].get<uint64_t>() > data)
      bad_file(path, at + ": data_offsets " + printable(offs.dump().substr(0, 60)) + " are not [begin, end] within the " +
                         std::to_string(data) + " data bytes");
    unsigned __int128 numel = 1;
    std::vector<int64_t> sizes;
    for (const auto& d : shape) {
      sizes.push_back(int64_t(d.get<uint64_t>()));
      numel *= d.get<uint64_t>();
      if (numel > (unsigned __int128)data) numel = (unsigned __int128)data + 1;  // stays bounded
    }
    uint64_t b = offs[0].get<uint64_t>(), e = offs[1].get<uint64_t>();
    if (numel * c10::elementSize(*st) != (unsigned __int128)(e - b))
      bad_file(path, at + ": " + std::to_string(e - b) + " bytes for " + c10::str(sizes) + " elements of " +
                         dt.get<std::string>());
    entries.push_back({key, *st, sizes, data_start + b, data_start + e});
  }
  std::vector<const Entry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const Entry* a, const Entry* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t pos = data_start;
  for (const Entry* e : order) {
    if (e->begin != pos)
      bad_file(path, "tensor '" + head_of(e->key) + "' " +
                         (e->begin < pos ? std::string("overlaps the tensor before it")
                                         : "leaves a gap of " + std::to_string(e->begin - pos) + " bytes"));
    pos = e->end;
  }
  if (pos != size) bad_file(path, std::to_string(size - pos) + " bytes after the last tensor");
  std::map<std::string, at::Tensor> out;
  for (const auto& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), buf.data() + e.begin, e.end - e.begin);
    out.emplace(e.key, std::move(t));
  }
  return out;
}

// Written to a temporary file and renamed: a failed write leaves no partial file.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<std::pair<std::string, at::Tensor>> items;
  for (const auto& [k, t] : tensors) items.emplace_back(k, t.contiguous());
  // Largest item size first, then key (the safetensors library's order): every tensor starts aligned.
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    size_t x = a.second.element_size(), y = b.second.element_size();
    return x != y ? x > y : a.first < b.first;
  });
  nlohmann::ordered_json head;
  head["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& [k, t] : items) {
    std::string name;
    for (const auto& [n, s] : dtypes())
      if (s == t.scalar_type()) name = n;
    if (name.empty())
      throw RunError("UnsupportedConstructError", "output '" + k + "' has dtype " + c10::toString(t.scalar_type()) +
                                                      ", which safetensors cannot hold");
    uint64_t nbytes = uint64_t(t.numel()) * t.element_size();
    head[k] = {{"dtype", name}, {"shape", t.sizes().vec()}, {"data_offsets", {off, off + nbytes}}};
    off += nbytes;
  }
  std::string h = head.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  errno = 0;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(h.size()) >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(h.data(), std::streamsize(h.size()));
    for (const auto& [k, t] : items)
      f.write(static_cast<const char*>(t.data_ptr()), std::streamsize(uint64_t(t.numel()) * t.element_size()));
    f.close();
    if (!f) {
      int err = errno;
      std::remove(tmp.c_str());
      throw RunError("OSError", path + ": cannot write the outputs file: " + (err ? std::strerror(err) : "write failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw RunError("OSError", path + ": cannot write the outputs file: " + std::strerror(err));
  }
}

}  // namespace

struct Runtime::Impl {
  std::unique_ptr<Method> method;
  std::vector<InputInfo> inputs;
  std::vector<std::string> labels;  // "args.0 (x)" as src/native/run/io.py prints an input
  std::map<std::string, size_t> index;
  std::vector<std::string> output_keys;
  std::vector<std::optional<c10::IValue>> leaves;
  std::vector<c10::IValue> outputs;

  // Runs f, turning the runtime's own errors into RunError with their kind and debug handle.
  template <class F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const RunError&) {
      throw;
    } catch (const Error& e) {
      std::optional<DebugInfo> d;
      if (e.instruction >= 0 && method) {
        const Program& p = method->program();
        DebugInfo di;
        di.instruction = e.instruction;
        int64_t h = size_t(e.instruction) < p.instruction_handles.size() ? p.instruction_handles[size_t(e.instruction)] : -1;
        if (h >= 0) {
          const DebugHandle& dh = p.debug_handles[size_t(h)];
          di.node = dh.node, di.op = dh.op, di.module = dh.module;
        }
        d = di;
      }
      throw RunError(kind_name(e.kind), e.what(), d);
    } catch (const c10::Error& e) {
      throw RunError("NativeRuntimeError", e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw RunError("NativeRuntimeError", e.what());
    }
  }

  void init(Loaded loaded, const RuntimeOptions& o) {
    Options opts;
    opts.arena = o.arena;
    opts.max_loop_instructions = o.max_loop_instructions;
    opts.verify_hashes = o.verify_hashes;
    opts.limits.max_arena_bytes = o.max_arena_bytes;
    method = std::make_unique<Method>(std::move(loaded), opts);
    const Program& p = method->program();
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const Input& in = p.inputs[i];
      const Value& v = p.values[size_t(in.value)];
      InputInfo info;
      info.key = p.input_keys.empty() ? "" : p.input_keys[i];
      info.name = in.name;
      if (in.constant) info.kind = "constant";
      else if (v.kind == VK::Tensor) {
        info.kind = "tensor";
        info.dtype = c10::toString(*to_scalar_type(v.dtype));
        info.rank = int64_t(v.sizes.size());
      } else if (v.kind == VK::SymInt || v.kind == VK::Int) info.kind = "int";
      else if (v.kind == VK::SymFloat || v.kind == VK::Float) info.kind = "float";
      else if (v.kind == VK::SymBool || v.kind == VK::Bool) info.kind = "bool";
      else info.kind = "constant";
      labels.push_back(!info.key.empty() && info.key != info.name ? info.key + " (" + info.name + ")" : info.name);
      if (!info.key.empty()) index[info.key] = i;
      index.emplace(info.name, i);
      inputs.push_back(std::move(info));
    }
    output_keys = p.output_keys;
    if (output_keys.size() != p.outputs.size()) {
      output_keys.clear();
      for (size_t i = 0; i < p.outputs.size(); ++i) output_keys.push_back("output." + std::to_string(i));
    }
    leaves.assign(p.inputs.size(), std::nullopt);
  }

  size_t find(const std::string& key, const std::string& where) const {
    auto it = index.find(key);
    if (it == index.end()) {
      std::string all;
      for (size_t i = 0; i < labels.size(); ++i) all += (i ? ", " : "") + labels[i];
      mismatch(where + "tensor '" + key + "' is not an input of the program; it takes " + (all.empty() ? "no inputs" : all));
    }
    return it->second;
  }
};

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;
Runtime::~Runtime() = default;

Runtime Runtime::load_file(const std::string& path, const RuntimeOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->guarded([&] {
    Limits limits;
    limits.max_arena_bytes = options.max_arena_bytes;
    impl->init(pt2n::load_file(path, path, options.verify_hashes, limits), options);
  });
  return Runtime(std::move(impl));
}

Runtime Runtime::load_buffer(const void* data, size_t size, const RuntimeOptions& options, const std::string& what) {
  auto impl = std::make_unique<Impl>();
  impl->guarded([&] {
    Limits limits;
    limits.max_arena_bytes = options.max_arena_bytes;
    const auto* b = static_cast<const uint8_t*>(data);
    impl->init(pt2n::load_bytes(std::vector<uint8_t>(b, b + size), what, options.verify_hashes, limits), options);
  });
  return Runtime(std::move(impl));
}

void Runtime::load_library(const std::string& path) {
  // RTLD_GLOBAL: a library may itself depend on symbols of another one loaded before it.
  if (!dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char* err = dlerror();
    throw RunError("NativeRuntimeError", "cannot load the operator library " + path + ": " + (err ? err : "unknown error"));
  }
}

const std::vector<InputInfo>& Runtime::inputs() const { return impl_->inputs; }
const std::vector<std::string>& Runtime::output_keys() const { return impl_->output_keys; }

void Runtime::set_input(const std::string& key, c10::IValue value) {
  impl_->leaves[impl_->find(key, "")] = std::move(value);
}

void Runtime::set_inputs_from_safetensors(const std::string& path) {
  Impl& m = *impl_;
  std::map<std::string, at::Tensor> tensors = read_safetensors(path);
  std::string where = path + ": ";
  std::vector<std::optional<std::string>> given(m.inputs.size());
  std::vector<std::optional<c10::IValue>> leaves(m.inputs.size());
  for (auto& [key, t] : tensors) {
    size_t i = m.find(key, where);
    if (given[i]) mismatch(where + "input " + m.labels[i] + " is given twice, as '" + *given[i] + "' and '" + key + "'");
    given[i] = key;
    const std::string& kind = m.inputs[i].kind;
    const Value& v = m.method->program().values[size_t(m.method->program().inputs[i].value)];
    bool number = kind == "int" || kind == "float" || kind == "bool" ||
                  (kind == "constant" && (v.kind == VK::Int || v.kind == VK::Float || v.kind == VK::Bool));
    if (!number) {
      leaves[i] = t;
      continue;
    }
    std::string want = kind == "constant" ? (v.kind == VK::Int ? "int" : v.kind == VK::Float ? "float" : "bool") : kind;
    auto dt = want == "int" ? at::kLong : want == "float" ? at::kDouble : at::kBool;
    if (t.dim() != 0 || t.scalar_type() != dt)
      mismatch(where + "input " + m.labels[i] + ": expected " + (want == "int" ? "an " : "a ") + want + " as a 0-dimensional " +
               (want == "int" ? "I64" : want == "float" ? "F64" : "BOOL") + " tensor, got " +
               c10::toString(t.scalar_type()) + c10::str(t.sizes()));
    if (want == "int") leaves[i] = t.item<int64_t>();
    else if (want == "float") leaves[i] = t.item<double>();
    else leaves[i] = t.item<bool>();
  }
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (!given[i] && m.inputs[i].kind != "constant") mismatch(where + "input " + m.labels[i] + " is missing");
  m.leaves = std::move(leaves);
}

void Runtime::run() {
  Impl& m = *impl_;
  m.guarded([&] {
    const Program& p = m.method->program();
    std::vector<c10::IValue> leaves;
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      if (m.leaves[i]) {
        leaves.push_back(*m.leaves[i]);
        continue;
      }
      if (m.inputs[i].kind != "constant") mismatch("input " + m.labels[i] + " is missing");
      const Value& v = p.values[size_t(p.inputs[i].value)];
      switch (v.kind) {  // a specialized input left out takes its exported value
        case VK::Int: leaves.emplace_back(v.i); break;
        case VK::Float: leaves.emplace_back(v.f); break;
        case VK::Bool: leaves.emplace_back(bool(v.i)); break;
        case VK::String: leaves.emplace_back(v.s); break;
        default: leaves.emplace_back(); break;
      }
    }
    m.outputs = m.method->run_flat(std::move(leaves));
  });
}

const std::vector<c10::IValue>& Runtime::outputs() const { return impl_->outputs; }

c10::IValue Runtime::output(const std::string& key) const {
  const auto& keys = impl_->output_keys;
  auto it = std::find(keys.begin(), keys.end(), key);
  if (it == keys.end() || size_t(it - keys.begin()) >= impl_->outputs.size())
    throw RunError("InputMismatchError", "no output '" + key + "' (after a run, the outputs are: " +
                                             c10::Join(", ", keys) + ")");
  return impl_->outputs[size_t(it - keys.begin())];
}

void Runtime::write_outputs_safetensors(const std::string& path) const {
  std::vector<std::pair<std::string, at::Tensor>> table;
  for (size_t i = 0; i < impl_->outputs.size(); ++i) {
    const c10::IValue& v = impl_->outputs[i];
    const std::string& key = impl_->output_keys[i];
    if (v.isNone()) continue;
    if (v.isTensor()) table.emplace_back(key, v.toTensor().detach());
    else if (v.isBool()) table.emplace_back(key, at::scalar_tensor(v.toBool(), at::kBool));
    else if (v.isInt()) table.emplace_back(key, at::scalar_tensor(v.toInt(), at::kLong));
    else if (v.isDouble()) table.emplace_back(key, at::scalar_tensor(v.toDouble(), at::kDouble));
    else
      throw RunError("UnsupportedConstructError", "output '" + key + "' is a " + v.tagKind() +
                                                      "; a safetensors file holds tensors and numbers");
  }
  write_safetensors(path, table);
}

}  // namespace pt2n
