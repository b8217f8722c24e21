// pt2serde-run: load, verify and run a native program without Python.
//
//   pt2serde-run check PROGRAM...       verify (container, header, indices, blobs, expressions, plan
//                                       bounds) and resolve every operator; exit 0 when accepted
//   pt2serde-run run PROGRAM... [--arena] [--repeat N] [--seed S] [--max-loop-instructions N]
//                                       run on inputs made from the program's input table (tensors
//                                       of the declared dtype with every symbol at its minimum or 2)
//   pt2serde-run run PROGRAM --inputs IN.safetensors [--outputs OUT.safetensors] [...]
//                                       run on the inputs of a safetensors file (keys as in
//                                       src/native/run/io.py) and write the outputs as one
//   --load-library LIB.so (repeatable, any command): dlopen a library registering operators
//                                       (TORCH_LIBRARY) before any program is loaded
//
// Each refusal prints one line "error: <NativeFormatError|...>: message" (prefixed by the path
// when several programs are given). Exit status: 0 all accepted/ran, 1 some refused, 2 usage.
#include <ATen/ops/randn.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "method.h"
#include "pt2n/runtime.h"

namespace {
const char* kind_name(pt2n::ErrorKind k) {
  switch (k) {
    case pt2n::ErrorKind::Format: return "NativeFormatError";
    case pt2n::ErrorKind::Version: return "NativeVersionError";
    case pt2n::ErrorKind::ArenaTooLarge: return "ArenaTooLargeError";
    case pt2n::ErrorKind::InputMismatch: return "InputMismatchError";
    case pt2n::ErrorKind::Runtime: return "NativeRuntimeError";
    case pt2n::ErrorKind::ArenaAlias: return "ArenaAliasError";
    case pt2n::ErrorKind::FlowTooLarge: return "FlowTooLargeError";
  }
  return "Error";
}

std::vector<c10::IValue> make_inputs(const pt2n::Program& p, uint64_t seed) {
  std::vector<std::optional<int64_t>> syms(p.symbols.size());
  for (size_t k = 0; k < p.symbols.size(); ++k) {
    const auto& s = p.symbols[k];
    int64_t v = std::max<int64_t>(s.min.value_or(2), 2);
    if (s.max && v > *s.max) v = *s.max;
    syms[k] = v;
  }
  at::manual_seed(seed);
  std::vector<c10::IValue> out;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const auto& in = p.inputs[i];
    const auto& v = p.values[size_t(in.value)];
    if (in.constant) {
      switch (v.kind) {
        case pt2n::VK::Int: out.emplace_back(v.i); break;
        case pt2n::VK::Float: out.emplace_back(v.f); break;
        case pt2n::VK::Bool: out.emplace_back(bool(v.i)); break;
        case pt2n::VK::String: out.emplace_back(v.s); break;
        default: out.emplace_back(); break;
      }
      continue;
    }
    if (v.kind == pt2n::VK::Tensor) {
      std::vector<int64_t> sizes;
      for (const auto& d : v.sizes) {
        int64_t n = d.v;
        if (d.sym) {
          auto e = pt2n::evaluate(p.exprs[size_t(d.v)], syms, "input size");
          n = e ? *e : 2;
        }
        sizes.push_back(n);
      }
      auto dt = *pt2n::to_scalar_type(v.dtype);
      auto opts = at::TensorOptions().dtype(dt);
      if (at::isFloatingType(dt) || at::isComplexType(dt)) out.emplace_back(at::randn(sizes, opts));
      else if (dt == at::kBool) out.emplace_back(at::randint(0, 2, sizes, at::TensorOptions().dtype(at::kLong)).to(at::kBool));
      else out.emplace_back(at::randint(0, 4, sizes, opts));
    } else if (v.kind == pt2n::VK::SymInt) {
      int64_t x = 2;
      for (size_t k = 0; k < p.symbols.size(); ++k)
        if (p.symbols[k].input == int64_t(i) && p.symbols[k].dim < 0) x = *syms[k] * p.symbols[k].scale + p.symbols[k].offset;
      out.emplace_back(x);
    } else if (v.kind == pt2n::VK::SymBool) {
      out.emplace_back(true);
    } else if (v.kind == pt2n::VK::SymFloat) {
      out.emplace_back(1.0);
    } else {
      out.emplace_back();
    }
  }
  return out;
}

void print_value(const std::string& key, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    std::cout << key << ": " << c10::toString(t.scalar_type()) << t.sizes() << "\n";
  } else {
    std::cout << key << ": " << v << "\n";
  }
}

int usage() {
  std::cerr << "usage: pt2serde-run check PROGRAM... [--load-library LIB.so]...\n"
               "       pt2serde-run run PROGRAM... [--arena] [--repeat N] [--seed S] [--max-loop-instructions N]\n"
               "       pt2serde-run run PROGRAM --inputs IN.safetensors [--outputs OUT.safetensors] [--arena] [--repeat N]\n"
               "options: --load-library LIB.so (repeatable) loads operator libraries first\n";
  return 2;
}

// A run on a safetensors inputs file, through the embedding API (include/pt2n/runtime.h).
int from_file(const std::string& path, const pt2n::Options& o, int repeat, const std::string& inputs,
              const std::string& outputs) {
  try {
    pt2n::RuntimeOptions ro;
    ro.arena = o.arena;
    ro.max_loop_instructions = o.max_loop_instructions;
    pt2n::Runtime rt = pt2n::Runtime::load_file(path, ro);
    rt.set_inputs_from_safetensors(inputs);
    auto t0 = std::chrono::steady_clock::now();
    // Each run starts from the state the last one left (mutated buffers), as repeated calls would.
    for (int r = 0; r < std::max(repeat, 1); ++r) rt.run();
    auto t1 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < rt.outputs().size(); ++k) print_value(rt.output_keys()[k], rt.outputs()[k]);
    if (!outputs.empty()) rt.write_outputs_safetensors(outputs);
    std::cout << "time per run: " << std::chrono::duration<double, std::micro>(t1 - t0).count() / std::max(repeat, 1)
              << " us" << std::endl;
    return 0;
  } catch (const pt2n::RunError& e) {
    std::cout << "error: " << e.kind() << ": " << e.what() << std::endl;
  }
  return 1;
}

// One program: 0 accepted (and ran), 1 refused. Errors are caught per program, so a list of
// files (the fuzz test passes many) reports each one.
int one(const std::string& cmd, const std::string& path, const pt2n::Options& o, int repeat, uint64_t seed, bool many) {
  std::string tag = many ? path + ": " : "";
  try {
    pt2n::Method m(pt2n::load_file(path, path, true, o.limits), o);
    if (cmd == "check") {
      std::cout << tag << "ok: " << m.program().instructions.size() << " instructions, " << m.program().values.size()
                << " values, format version " << m.program().format_version << std::endl;
      return 0;
    }
    auto inputs = make_inputs(m.program(), seed);
    std::vector<c10::IValue> outs;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < std::max(repeat, 1); ++r) outs = m.run_flat(inputs);
    auto t1 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < outs.size(); ++k) print_value(tag + "output[" + std::to_string(k) + "]", outs[k]);
    std::cout << tag << "time per run: "
              << std::chrono::duration<double, std::micro>(t1 - t0).count() / std::max(repeat, 1) << " us" << std::endl;
    return 0;
  } catch (const pt2n::Error& e) {
    std::cout << tag << "error: " << kind_name(e.kind) << ": " << e.what() << std::endl;
  } catch (const c10::Error& e) {
    std::cout << tag << "error: NativeRuntimeError: " << e.what_without_backtrace() << std::endl;
  } catch (const std::exception& e) {
    std::cout << tag << "error: NativeRuntimeError: " << e.what() << std::endl;
  }
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string cmd = argv[1];
  std::vector<std::string> paths;
  pt2n::Options o;
  int repeat = 1;
  uint64_t seed = 0;
  std::string inputs, outputs;
  std::vector<std::string> libraries;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--arena") o.arena = true;
    else if (a == "--inputs" && i + 1 < argc) inputs = argv[++i];
    else if (a == "--outputs" && i + 1 < argc) outputs = argv[++i];
    else if (a == "--load-library" && i + 1 < argc) libraries.push_back(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--max-loop-instructions" && i + 1 < argc) o.max_loop_instructions = std::atoll(argv[++i]);
    else if (a.rfind("--", 0) == 0) return usage();
    else paths.push_back(a);
  }
  if ((cmd != "check" && cmd != "run") || paths.empty()) return usage();
  if (!outputs.empty() && inputs.empty()) return usage();
  if (!inputs.empty() && (cmd != "run" || paths.size() != 1)) return usage();
  for (const auto& lib : libraries) {
    try {
      pt2n::Runtime::load_library(lib);
    } catch (const pt2n::RunError& e) {
      std::cout << "error: " << e.kind() << ": " << e.what() << std::endl;
      return 1;
    }
  }
  if (!inputs.empty()) return from_file(paths[0], o, repeat, inputs, outputs);
  int rc = 0;
  for (const auto& p : paths) rc |= one(cmd, p, o, repeat, seed, paths.size() > 1);
  return rc;
}
