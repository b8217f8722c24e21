// A small operator library for the --load-library test: registers pt2n_test::twice_plus with
// TORCH_LIBRARY, as a user's kernel library would. The kernel is a hand loop (not ATen's add), so
// a run that matches eager really went through this library.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace {
at::Tensor twice_plus(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "twice_plus takes float32 tensors");
  TORCH_CHECK(a.sizes() == b.sizes(), "twice_plus takes tensors of one shape");
  at::Tensor x = a.contiguous(), y = b.contiguous();
  at::Tensor out = at::empty_like(x);
  const float* p = x.data_ptr<float>();
  const float* q = y.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = p[i] * 2.0f + q[i];
  return out;
}
}  // namespace

TORCH_LIBRARY(pt2n_test, m) { m.def("twice_plus(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(pt2n_test, CPU, m) { m.impl("twice_plus", &twice_plus); }
