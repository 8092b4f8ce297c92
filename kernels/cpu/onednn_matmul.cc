#include "kernels/cpu/onednn_matmul.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace plateau::kernels::cpu {

uint16_t FloatToBf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);  // to nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result = 0;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

void ConvertToBf16(absl::Span<const float> from, absl::Span<uint16_t> to) {
  for (size_t i = 0; i < from.size(); ++i) to[i] = FloatToBf16(from[i]);
}

struct OneDnnMatmul::State {
  dnnl::engine engine;
  dnnl::memory::desc a;
  dnnl::memory::desc b;
  dnnl::memory::desc c;
  dnnl::matmul primitive;
};

OneDnnMatmul::OneDnnMatmul(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

OneDnnMatmul::~OneDnnMatmul() = default;

absl::StatusOr<std::unique_ptr<OneDnnMatmul>> OneDnnMatmul::Create(
    int64_t m, int64_t k, int64_t n, bool b_transposed, MatmulInput input) {
  if (m <= 0 || k <= 0 || n <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul sizes must be positive, got ", m, " x ", k, " x ", n));
  }
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::data_type type = input == MatmulInput::kBf16
                                           ? dnnl::memory::data_type::bf16
                                           : dnnl::memory::data_type::f32;
  try {
    auto state = std::make_unique<State>();
    state->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    state->a = dnnl::memory::desc({m, k}, type, tag::ab);
    state->b =
        dnnl::memory::desc({k, n}, type, b_transposed ? tag::ba : tag::ab);
    state->c =
        dnnl::memory::desc({m, n}, dnnl::memory::data_type::f32, tag::ab);
    const dnnl::matmul::primitive_desc description(
        dnnl::matmul::desc(state->a, state->b, state->c), state->engine);
    state->primitive = dnnl::matmul(description);
    std::string implementation = description.impl_info_str();
    std::unique_ptr<OneDnnMatmul> matmul(new OneDnnMatmul(std::move(state)));
    matmul->implementation_ = std::move(implementation);
    return matmul;
  } catch (const dnnl::error& e) {
    return absl::UnimplementedError(
        absl::StrCat("oneDNN has no ", m, " x ", k, " x ", n,
                     " matmul on this CPU: ", e.what()));
  }
}

absl::Status OneDnnMatmul::Run(const void* a, const void* b, float* c) const {
  try {
    const dnnl::engine& engine = state_->engine;
    dnnl::stream stream(engine);
    dnnl::memory a_memory(state_->a, engine, const_cast<void*>(a));
    dnnl::memory b_memory(state_->b, engine, const_cast<void*>(b));
    dnnl::memory c_memory(state_->c, engine, c);
    state_->primitive.execute(stream, {{DNNL_ARG_SRC, a_memory},
                                       {DNNL_ARG_WEIGHTS, b_memory},
                                       {DNNL_ARG_DST, c_memory}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace plateau::kernels::cpu
