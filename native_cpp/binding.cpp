// Python binding of the C++ runtime (module `_pt2n_cpp`), used by src/native/run/cpp_engine.py.
// Conversions stay here: Python leaves -> IValues, IValues -> Python; errors become the
// classes of native.errors.
#include <torch/csrc/autograd/python_variable.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>

#include "method.h"

namespace py = pybind11;
using c10::IValue;

namespace {

struct PyError : std::exception {
  pt2n::ErrorKind kind;
  std::string msg;
  PyError(pt2n::ErrorKind k, std::string m) : kind(k), msg(std::move(m)) {}
  const char* what() const noexcept override { return msg.c_str(); }
};

IValue to_ivalue(const py::handle& o, size_t i) {
  PyObject* p = o.ptr();
  if (THPVariable_Check(p)) return THPVariable_Unpack(p);
  if (PyBool_Check(p)) return bool(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (overflow) throw PyError(pt2n::ErrorKind::InputMismatch, "input " + std::to_string(i) + ": the int does not fit int64");
    return int64_t(v);
  }
  if (PyFloat_Check(p)) return PyFloat_AsDouble(p);
  if (p == Py_None) return IValue();
  if (PyUnicode_Check(p)) return py::cast<std::string>(o);
  throw PyError(pt2n::ErrorKind::InputMismatch, "input " + std::to_string(i) + ": a " +
                                                    std::string(Py_TYPE(p)->tp_name) + " is not a value the C++ runtime takes "
                                                    "(tensors, ints, floats, bools, strings, None)");
}

py::object to_py(const IValue& v) {
  if (v.isTensor()) return py::reinterpret_steal<py::object>(THPVariable_Wrap(v.toTensor()));
  if (v.isNone()) return py::none();
  if (v.isBool()) return py::bool_(v.toBool());
  if (v.isInt()) return py::int_(v.toInt());
  if (v.isDouble()) return py::float_(v.toDouble());
  if (v.isString()) return py::str(v.toStringRef());
  if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    return py::reinterpret_steal<py::object>(PyComplex_FromDoubles(c.real(), c.imag()));
  }
  if (v.isList() || v.isIntList() || v.isDoubleList() || v.isBoolList() || v.isTensorList()) {
    py::list out;
    for (const IValue& x : v.toListRef()) out.append(to_py(x));
    return out;
  }
  if (v.isTuple()) {
    py::list out;  // several returns stored in one value: Python's runtime keeps the tuple
    for (const IValue& x : v.toTupleRef().elements()) out.append(to_py(x));
    return py::tuple(out);
  }
  throw PyError(pt2n::ErrorKind::Runtime, "an output is a " + v.tagKind() + ", which the binding does not convert");
}

template <class F>
auto guarded(F f) {
  try {
    return f();
  } catch (const pt2n::Error& e) {
    throw PyError(e.kind, e.what());
  } catch (const PyError&) {
    throw;
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& e) {
    // What the loader and runtime do not name themselves is still a typed error, never a
    // foreign RuntimeError from a hostile file.
    throw PyError(pt2n::ErrorKind::Runtime, std::string("the C++ runtime failed: ") + e.what());
  }
}

class PyMethod {
 public:
  PyMethod(py::bytes data, const std::string& what, bool arena, std::optional<int64_t> max_loop, bool verify,
           uint64_t max_arena_bytes, uint64_t max_flow_cells) {
    std::string_view sv = data;
    std::vector<uint8_t> bytes(sv.begin(), sv.end());
    pt2n::Options o;
    o.arena = arena;
    o.max_loop_instructions = max_loop ? *max_loop : -1;
    o.verify_hashes = verify;
    o.limits.max_arena_bytes = max_arena_bytes;
    o.limits.max_flow_cells = max_flow_cells;
    m_ = guarded([&] {
      return std::make_unique<pt2n::Method>(pt2n::load_bytes(std::move(bytes), what, verify, o.limits), o);
    });
  }

  py::list run_flat(const py::sequence& leaves) {
    std::vector<IValue> in;
    in.reserve(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) in.push_back(to_ivalue(leaves[i], i));
    std::vector<IValue> out;
    {
      // The GIL is released while kernels run; a Method holds per-run state, so concurrent
      // calls on one object take turns instead of racing.
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      out = guarded([&] { return m_->run_flat(std::move(in)); });
    }
    py::list res;
    for (const IValue& v : out) res.append(to_py(v));
    return res;
  }

  // (outputs, [(instruction index, nanoseconds), ...]) for native.run.profile.summarize.
  py::tuple run_profiled(const py::sequence& leaves) {
    std::vector<IValue> in;
    in.reserve(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) in.push_back(to_ivalue(leaves[i], i));
    std::vector<IValue> out;
    std::vector<std::pair<int64_t, int64_t>> timings;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      out = guarded([&] { return m_->run_profiled(std::move(in), timings); });
    }
    py::list res, prof;
    for (const IValue& v : out) res.append(to_py(v));
    for (const auto& [pc, ns] : timings) prof.append(py::make_tuple(pc, ns));
    return py::make_tuple(res, prof);
  }

  std::pair<double, double> kernel_floor(const py::sequence& leaves, int repeats) {
    std::vector<IValue> in;
    for (size_t i = 0; i < leaves.size(); ++i) in.push_back(to_ivalue(leaves[i], i));
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return guarded([&] { return m_->kernel_floor(std::move(in), repeats); });
  }

  py::dict state_dict() const {
    py::dict d;
    for (const auto& [name, t] : m_->state()) d[py::str(name)] = to_py(t);
    return d;
  }

  std::optional<std::string> in_spec() const { return m_->program().in_spec; }
  std::optional<std::string> out_spec() const { return m_->program().out_spec; }
  size_t num_outputs() const { return m_->program().outputs.size(); }
  int64_t arena_bytes() const { return m_->arena_bytes(); }
  size_t num_instructions() const { return m_->program().instructions.size(); }

 private:
  std::unique_ptr<pt2n::Method> m_;
  std::mutex mu_;
};

}  // namespace

PYBIND11_MODULE(_pt2n_cpp, mod) {
  mod.doc() = "C++ runtime of pt2serde native programs";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PyError& e) {
      static const char* names[] = {"NativeFormatError", "NativeVersionError", "ArenaTooLargeError",
                                    "InputMismatchError", "NativeRuntimeError", "ArenaAliasError",
                                    "FlowTooLargeError"};
      py::object cls = py::module_::import("native.errors").attr(names[int(e.kind)]);
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
  py::class_<PyMethod>(mod, "Method")
      .def(py::init<py::bytes, const std::string&, bool, std::optional<int64_t>, bool, uint64_t, uint64_t>(),
           py::arg("data"), py::arg("what"), py::arg("arena"), py::arg("max_loop_instructions"), py::arg("verify"),
           py::arg("max_arena_bytes"), py::arg("max_flow_cells"))
      .def("run_flat", &PyMethod::run_flat)
      .def("run_profiled", &PyMethod::run_profiled)
      .def("state_dict", &PyMethod::state_dict)
      .def("kernel_floor", &PyMethod::kernel_floor)
      .def_property_readonly("in_spec", &PyMethod::in_spec)
      .def_property_readonly("out_spec", &PyMethod::out_spec)
      .def_property_readonly("num_outputs", &PyMethod::num_outputs)
      .def_property_readonly("arena_bytes", &PyMethod::arena_bytes)
      .def_property_readonly("num_instructions", &PyMethod::num_instructions);
  mod.attr("FORMAT_VERSIONS") = py::make_tuple(pt2n::kMinFormatVersion, pt2n::kMaxFormatVersion);
}
