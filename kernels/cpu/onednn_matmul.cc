#include "kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/cpu/simd.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "oneapi/dnnl/dnnl_debug.h"

namespace plateau::kernels::cpu {
namespace {

using Tag = dnnl::memory::format_tag;

constexpr dnnl::memory::dim kAnySize = DNNL_RUNTIME_DIM_VAL;

// oneDNN's ISA held at the SIMD level the kernels run at (PLATEAU_SIMD
// lowers both), unless the user caps it with its own variable. Before any
// other oneDNN call: the cap can be set once, and only then.
void HoldOneDnnAtSimdLevel() {
  static const bool held = [] {
    if (std::getenv("DNNL_MAX_CPU_ISA") != nullptr ||
        std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr) {
      return false;
    }
    __builtin_cpu_init();
    switch (DetectedSimdLevel()) {
      case SimdLevel::kAvx512:
        return false;
      case SimdLevel::kAvx2:
        return dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) ==
               dnnl::status::success;
      case SimdLevel::kScalar:
        // SSE4.1 is oneDNN's least ISA; an older CPU has it decide.
        return __builtin_cpu_supports("sse4.1") &&
               dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41) ==
                   dnnl::status::success;
    }
    return false;
  }();
  (void)held;
}

}  // namespace

std::string OneDnnIsa() {
  HoldOneDnnAtSimdLevel();
  return std::string(absl::StripPrefix(
      dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()), "cpu_isa_"));
}

struct OneDnnMatmul::State {
  dnnl::engine engine;
  MatmulLayout layout;
  dnnl::memory::data_type input_type;
  dnnl::matmul primitive;
};

OneDnnMatmul::OneDnnMatmul(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

OneDnnMatmul::~OneDnnMatmul() = default;

absl::StatusOr<std::unique_ptr<OneDnnMatmul>> OneDnnMatmul::Create(
    const MatmulLayout& layout) {
  HoldOneDnnAtSimdLevel();
  const dnnl::memory::data_type type = layout.input == MatmulInput::kBf16
                                           ? dnnl::memory::data_type::bf16
                                           : dnnl::memory::data_type::f32;
  try {
    auto state = std::make_unique<State>();
    state->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    state->layout = layout;
    state->input_type = type;
    // Sizes known only at Run, layouts by tag: strides left to run time
    // at creation would send oneDNN to its reference code. The gemm-based
    // kernels read each matrix's leading dimension from the memory given
    // when they run, so Run passes the strides there.
    const dnnl::memory::desc a({kAnySize, kAnySize}, type,
                               layout.a_transposed ? Tag::ba : Tag::ab);
    const dnnl::memory::desc b({kAnySize, kAnySize}, type,
                               layout.b_transposed ? Tag::ba : Tag::ab);
    const dnnl::memory::desc c({kAnySize, kAnySize},
                               dnnl::memory::data_type::f32, Tag::ab);
    dnnl::primitive_attr attributes;
    if (layout.alpha != 1.0f) attributes.set_output_scales(0, {layout.alpha});
    if (layout.beta != 0.0f) {
      dnnl::post_ops accumulate;
      accumulate.append_sum(layout.beta);
      attributes.set_post_ops(accumulate);
    }
    const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(a, b, c),
                                                   attributes, state->engine);
    std::string implementation = description.impl_info_str();
    if (!absl::StartsWith(implementation, "gemm:")) {
      return absl::UnimplementedError(absl::StrCat(
          "oneDNN's matmul kernel for this layout on this CPU is \"",
          implementation,
          "\", not one of its gemm-based kernels, which are the ones that "
          "take strided operands"));
    }
    state->primitive = dnnl::matmul(description);
    std::unique_ptr<OneDnnMatmul> matmul(new OneDnnMatmul(std::move(state)));
    matmul->implementation_ = std::move(implementation);
    return matmul;
  } catch (const dnnl::error& e) {
    return absl::UnimplementedError(
        absl::StrCat("oneDNN cannot make this matmul: ", e.what()));
  }
}

absl::Status OneDnnMatmul::Run(int64_t m, int64_t k, int64_t n, const void* a,
                               int64_t lda, const void* b, int64_t ldb,
                               float* c, int64_t ldc) const {
  if (m <= 0 || k <= 0 || n <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul sizes must be positive, got ", m, " x ", k, " x ", n));
  }
  const MatmulLayout& layout = state_->layout;
  const int64_t a_row = layout.a_transposed ? m : k;
  const int64_t b_row = layout.b_transposed ? k : n;
  if (lda < a_row || ldb < b_row || ldc < n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul ", m, " x ", k, " x ", n, ": leading dimensions (a ", lda,
        ", b ", ldb, ", c ", ldc, ") must be at least their stored rows (",
        a_row, ", ", b_row, ", ", n, ")"));
  }
  if (m == 1) return RunOneRow(k, n, a, lda, b, ldb, c);
  return Execute(m, k, n, a, lda, b, ldb, c, ldc);
}

absl::Status OneDnnMatmul::Run(int64_t m, int64_t k, int64_t n, const void* a,
                               const void* b, float* c) const {
  const MatmulLayout& layout = state_->layout;
  return Run(m, k, n, a, layout.a_transposed ? m : k, b,
             layout.b_transposed ? k : n, c, n);
}

// a's one row is its k values, lda apart when transposed; the copies are
// [2, k] row-major, or stored [k, 2] when transposed. They are small (k
// values of a, 2 n of c) and live only during the call.
absl::Status OneDnnMatmul::RunOneRow(int64_t k, int64_t n, const void* a,
                                     int64_t lda, const void* b, int64_t ldb,
                                     float* c) const {
  const MatmulLayout& layout = state_->layout;
  const size_t element_bytes =
      layout.input == MatmulInput::kBf16 ? sizeof(uint16_t) : sizeof(float);
  std::vector<char> rows(2 * k * element_bytes);
  const char* row = static_cast<const char*>(a);
  const int64_t row_stride = layout.a_transposed ? lda : 1;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t first = layout.a_transposed ? 2 * i : i;
    const int64_t second = layout.a_transposed ? 2 * i + 1 : k + i;
    const char* value = row + i * row_stride * element_bytes;
    std::memcpy(rows.data() + first * element_bytes, value, element_bytes);
    std::memcpy(rows.data() + second * element_bytes, value, element_bytes);
  }
  std::vector<float> out(2 * n);
  if (layout.beta != 0.0f) {
    std::copy_n(c, n, out.begin());
    std::copy_n(c, n, out.begin() + n);
  }
  const absl::Status run = Execute(
      2, k, n, rows.data(), layout.a_transposed ? 2 : k, b, ldb, out.data(), n);
  if (run.ok()) std::copy_n(out.begin(), n, c);
  return run;
}

absl::Status OneDnnMatmul::Execute(int64_t m, int64_t k, int64_t n,
                                   const void* a, int64_t lda, const void* b,
                                   int64_t ldb, float* c, int64_t ldc) const {
  const MatmulLayout& layout = state_->layout;
  // Strides as oneDNN's memory descriptors take them: elements from one
  // index to the next in each dimension.
  const auto strides = [](bool transposed, int64_t leading) {
    return transposed ? dnnl::memory::dims{1, leading}
                      : dnnl::memory::dims{leading, 1};
  };
  try {
    const dnnl::engine& engine = state_->engine;
    dnnl::stream stream(engine);
    dnnl::memory a_memory(dnnl::memory::desc({m, k}, state_->input_type,
                                             strides(layout.a_transposed, lda)),
                          engine, const_cast<void*>(a));
    dnnl::memory b_memory(dnnl::memory::desc({k, n}, state_->input_type,
                                             strides(layout.b_transposed, ldb)),
                          engine, const_cast<void*>(b));
    dnnl::memory c_memory(
        dnnl::memory::desc({m, n}, dnnl::memory::data_type::f32,
                           strides(false, ldc)),
        engine, c);
    state_->primitive.execute(stream, {{DNNL_ARG_SRC, a_memory},
                                       {DNNL_ARG_WEIGHTS, b_memory},
                                       {DNNL_ARG_DST, c_memory}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("oneDNN matmul ", m, " x ", k, " x ", n, ": ", e.what()));
  }
  return absl::OkStatus();
}

void SetOneDnnThreads(int threads) { omp_set_num_threads(threads); }

void UseOneOneDnnThread() {
  thread_local bool set = false;
  if (!set) {
    SetOneDnnThreads(1);
    set = true;
  }
}

}  // namespace plateau::kernels::cpu
