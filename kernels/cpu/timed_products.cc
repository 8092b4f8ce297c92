#include "kernels/cpu/timed_products.h"

#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"

namespace plateau::kernels::cpu {
namespace {

std::vector<float> Values(int64_t count, float scale) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) {
    values[i] = scale * static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f;
  }
  return values;
}

}  // namespace

ProductOperands::ProductOperands(const ProductShape& shape)
    : shape_(shape),
      a_(Values(shape.m * shape.k, 1.0f)),
      b_(Values(shape.k * shape.n, 0.05f)),
      c_(shape.m * shape.n, 0.0f),
      a_bf16_(a_.size()),
      b_bf16_(b_.size()) {
  ConvertToBf16(a_, absl::MakeSpan(a_bf16_));
  ConvertToBf16(b_, absl::MakeSpan(b_bf16_));
}

GemmArgs ProductOperands::Args(bool bf16) {
  GemmArgs args;
  args.transpose_a = shape_.transpose_a;
  args.transpose_b = shape_.transpose_b;
  args.m = shape_.m;
  args.n = shape_.n;
  args.k = shape_.k;
  args.lda = shape_.transpose_a == Transpose::kNo ? shape_.k : shape_.m;
  args.ldb = shape_.transpose_b == Transpose::kNo ? shape_.n : shape_.k;
  args.ldc = shape_.n;
  args.c = c_.data();
  if (bf16) {
    args.precision = GemmPrecision::kBf16;
    args.a_bf16 = a_bf16_.data();
    args.b_bf16 = b_bf16_.data();
  } else {
    args.a = a_.data();
    args.b = b_.data();
  }
  return args;
}

}  // namespace plateau::kernels::cpu
