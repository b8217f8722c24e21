// The embedding API of the pt2serde native runtime: load and verify a `.pt2n` program, set its
// inputs, run it and read its outputs, from C++ without Python.
//
//   #include <pt2n/runtime.h>
//   pt2n::Runtime rt = pt2n::Runtime::load_file("model.pt2n");   // or load_buffer(data, size)
//   rt.set_input("args.0", at::randn({4, 8}));                  // or set_inputs_from_safetensors(path)
//   rt.run();
//   at::Tensor y = rt.output("output").toTensor();              // or write_outputs_safetensors(path)
//
// Every failure throws pt2n::RunError: its kind() is the name of the matching Python class
// (NativeFormatError, InputMismatchError, NativeRuntimeError, ...) and, when a run failed inside
// an instruction, debug() gives that instruction's node, operator and module.
// A Runtime holds its program's weights and state (mutated buffers persist across runs): use one
// per thread. Link with the CMake package `pt2n` (target pt2n::runtime) or pkg-config `pt2n`.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pt2n {

struct RuntimeOptions {
  bool arena = false;                         // place planned tensors in the memory-plan arena
  int64_t max_loop_instructions = 10'000'000;  // a run fails instead of hanging past it; < 0: no limit
  bool verify_hashes = true;                  // check every weight blob's sha256 at load
  uint64_t max_arena_bytes = uint64_t(1) << 36;
};

// Where a run failed: the instruction, and its debug handle (empty strings when it has none).
struct DebugInfo {
  int64_t instruction = -1;
  std::string node;    // the canonical node name
  std::string op;      // the node's target, e.g. torch.ops.aten.linear.default
  std::string module;  // nn_module_stack path, "" at the top level
};

class RunError : public std::runtime_error {
 public:
  RunError(std::string kind, const std::string& message, std::optional<DebugInfo> debug = std::nullopt)
      : std::runtime_error(message), kind_(std::move(kind)), debug_(std::move(debug)) {}
  const std::string& kind() const noexcept { return kind_; }
  const std::optional<DebugInfo>& debug() const noexcept { return debug_; }

 private:
  std::string kind_;
  std::optional<DebugInfo> debug_;
};

// One user input of the program, in flattening order.
struct InputInfo {
  std::string key;    // its path in (args, kwargs), e.g. "args.0" ("" in files of older emitters)
  std::string name;   // the program's name for it, e.g. "x"
  std::string kind;   // "tensor", "int", "float", "bool" or "constant" (specialized at export)
  std::string dtype;  // tensors: c10's name, e.g. "Float"
  int64_t rank = 0;   // tensors: the number of dimensions
};

class Runtime {
 public:
  static Runtime load_file(const std::string& path, const RuntimeOptions& options = {});
  // `what` names the program in error messages. The bytes are copied.
  static Runtime load_buffer(const void* data, size_t size, const RuntimeOptions& options = {},
                             const std::string& what = "native program");
  // dlopen a library that registers operators (TORCH_LIBRARY) before loading programs using them.
  static void load_library(const std::string& path);

  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  ~Runtime();

  const std::vector<InputInfo>& inputs() const;
  const std::vector<std::string>& output_keys() const;  // "output", "output.0", ...

  // An input by key or name. Ints, floats and bools are c10::IValue scalars; inputs the program
  // was specialized to may be left unset.
  void set_input(const std::string& key_or_name, c10::IValue value);
  // Every input from a safetensors file (keys as set_input; numbers as 0-dimensional tensors).
  void set_inputs_from_safetensors(const std::string& path);
  void run();
  // The flattened outputs of the last run, in output_keys() order.
  const std::vector<c10::IValue>& outputs() const;
  c10::IValue output(const std::string& key) const;
  // The last run's outputs as a safetensors file (numbers as 0-dimensional tensors, None left out).
  void write_outputs_safetensors(const std::string& path) const;

 private:
  struct Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pt2n
