// The C++ runtime of native programs: mirrors src/native/run/runtime.py (Method) instruction for
// instruction, calling the same ATen kernels through the dispatcher (boxed), so results are
// bit-identical to the Python runtime.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <deque>
#include <functional>
#include <map>

#include "program.h"

namespace pt2n {

struct Options {
  bool arena = false;
  int64_t max_loop_instructions = 10'000'000;  // < 0: no limit
  bool verify_hashes = true;
  Limits limits;
};

// "symbolic::<name>" operators (src/native/format/prim.py), on ints, floats and bools with Python's semantics.
using PrimFn = c10::IValue (*)(const std::vector<c10::IValue>&);
PrimFn find_prim(const std::string& name);

class Method {
 public:
  Method(Loaded loaded, Options opts);

  // Flattened user inputs -> flattened user outputs (see runtime.py Method.run_flat).
  std::vector<c10::IValue> run_flat(std::vector<c10::IValue> leaves);

  // For the benchmark: over `repeats` timed runs, the fastest run's wall time and the time spent
  // inside its kernel calls (each callBoxed timed), in seconds. The difference is the runtime's
  // own overhead (clock reads included, so it is an upper bound).
  std::pair<double, double> kernel_floor(std::vector<c10::IValue> leaves, int repeats);

  // run_flat, also filling `timings` with (instruction index, nanoseconds) per executed
  // instruction (native.run.profile.summarize maps them to nodes and modules).
  std::vector<c10::IValue> run_profiled(std::vector<c10::IValue> leaves, std::vector<std::pair<int64_t, int64_t>>& timings);

  const Program& program() const { return lp_.program; }
  int64_t arena_bytes() const { return arena_.numel(); }  // grows with the runs' sizes (symbolic plans)
  const std::vector<std::pair<std::string, at::Tensor>>& state() const { return state_; }
  std::string describe(size_t pc) const;
  // The user-visible (value, kind) of each input, for binding-side conversions.
  size_t num_inputs() const { return lp_.program.inputs.size(); }

  struct Arg {
    int64_t idx = -1;        // value index read at run time, or -1 with `fixed`
    c10::IValue fixed;            // a constant, coerced once
    c10::TypePtr type;       // set when the run-time value needs coercion
    bool boxed = false;      // a List value: rebuilt from its items on every read
  };

  struct Step {
    IK kind;
    int64_t a = 0, b = 0;
    std::optional<c10::OperatorHandle> op;
    PrimFn prim = nullptr;
    std::vector<Arg> args;
    std::vector<int64_t> outs;
    std::vector<int> out_slots;  // out variant: position of each out tensor among the pushed arguments
    std::vector<char> out_static;
    bool use_out = false, simple_store = false;
    std::vector<int64_t> fresh;  // arena mode, run functionally: tensor results declared fresh
  };

 private:
  void bind(std::vector<c10::IValue>& values, const std::vector<c10::IValue>& leaves);
  int64_t eval(int64_t k);
  std::optional<int64_t> try_eval(int64_t k);
  void dims(const Value& t, std::vector<int64_t>& sizes, std::vector<int64_t>& strides, int64_t& offset);
  at::Tensor new_tensor(int64_t value);
  at::Tensor arena_view(int64_t value);
  c10::IValue read(const std::vector<c10::IValue>& values, int64_t i) const;
  void store(std::vector<c10::IValue>& values, int64_t o, c10::IValue r, size_t pc);
  void prepare();
  void check_aliases(const std::vector<std::optional<c10::OperatorHandle>>& handles) const;
  void check_fresh(const std::vector<c10::IValue>& values, const Step& s, size_t pc) const;
  void check_results(const std::vector<c10::IValue>& values, const Step& s, size_t pc);
  static bool symbolic(const Value& m);
  int64_t span_bytes(int64_t value);
  void replan();

  // Slot offsets for one set of symbol values (plans_[0]: the stored plan).
  struct Plan { std::vector<int64_t> offsets; int64_t size = 0; std::map<int64_t, at::Tensor> views; };

  Loaded lp_;
  Options opts_;
  at::Tensor segment_, arena_;
  std::vector<c10::IValue> initial_;
  std::vector<std::pair<std::string, at::Tensor>> state_;
  std::map<int64_t, size_t> alloc_;  // value -> index into memory_plan.allocations (arena mode)
  bool dynamic_plan_ = false;
  std::deque<Plan> plans_;  // a deque: cur_ stays valid as plans are added
  std::map<std::vector<std::optional<int64_t>>, size_t> plan_index_;
  std::vector<size_t> order_;  // allocations by (-nbytes, start, value), memory.pack's order
  Plan* cur_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>>* timings_ = nullptr;
  std::vector<Step> code_;
  std::vector<std::optional<int64_t>> syms_;
  std::vector<std::optional<int64_t>> expr_cache_;
  std::vector<char> expr_done_;
  std::vector<c10::IValue> stack_;
  double* kernel_time_ = nullptr;
};

// Schema enum values (serde.core.schema) -> c10 enums; nullopt for values torch has no counterpart for.
std::optional<c10::ScalarType> to_scalar_type(int64_t s);

}  // namespace pt2n
