// Gemm and GroupedGemm against float64 products.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

// The product of GemmArgs whose pointers address the host copies a, b, c.
Doubles ReferenceGemm(const GemmArgs& args, const Floats& a, const Floats& b,
                      const Floats& c_before) {
  Doubles c(c_before.begin(), c_before.end());
  for (int64_t i = 0; i < args.m; ++i) {
    for (int64_t j = 0; j < args.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < args.k; ++p) {
        const double a_ip = args.transpose_a == Transpose::kNo
                                ? a[i * args.lda + p]
                                : a[p * args.lda + i];
        const double b_pj = args.transpose_b == Transpose::kNo
                                ? b[p * args.ldb + j]
                                : b[j * args.ldb + p];
        sum += a_ip * b_pj;
      }
      c[i * args.ldc + j] = args.alpha * sum + args.beta * c[i * args.ldc + j];
    }
  }
  return c;
}

struct GemmShape {
  int64_t m, n, k;
  Transpose transpose_a, transpose_b;
  int64_t padding;  // added to every leading dimension
};

// One product's operands on the host and on the device.
struct GemmOperands {
  GemmOperands(ConformanceBackend& backend, const GemmShape& shape, float beta,
               int seed) {
    args.transpose_a = shape.transpose_a;
    args.transpose_b = shape.transpose_b;
    args.m = shape.m;
    args.n = shape.n;
    args.k = shape.k;
    args.alpha = 0.75f;
    args.beta = beta;
    const bool plain_a = shape.transpose_a == Transpose::kNo;
    const bool plain_b = shape.transpose_b == Transpose::kNo;
    args.lda = (plain_a ? shape.k : shape.m) + shape.padding;
    args.ldb = (plain_b ? shape.n : shape.k) + shape.padding;
    args.ldc = shape.n + shape.padding;
    a = RandomFloats((plain_a ? shape.m : shape.k) * args.lda, seed);
    b = RandomFloats((plain_b ? shape.k : shape.n) * args.ldb, seed + 1);
    c = RandomFloats(shape.m * args.ldc, seed + 2);
    device_a = std::make_unique<DeviceFloats>(backend, a);
    device_b = std::make_unique<DeviceFloats>(backend, b);
    device_c = std::make_unique<DeviceFloats>(backend, c);
    args.a = device_a->get();
    args.b = device_b->get();
    args.c = device_c->get();
  }
  Doubles Expected() const { return ReferenceGemm(args, a, b, c); }

  GemmArgs args;
  Floats a, b, c;
  std::unique_ptr<DeviceFloats> device_a, device_b, device_c;
};

TEST_P(OpsConformanceTest, GemmMatchesFloat64InEveryLayout) {
  struct Size {
    int64_t m, n, k;
  };
  // Tall, wide, tiny, ragged, single rows and columns, and k = 0 (c = beta c).
  int seed = 1;
  for (const Size& size :
       {Size{97, 33, 40}, Size{20, 130, 64}, Size{3, 5, 7}, Size{64, 64, 1},
        Size{1, 130, 7}, Size{64, 1, 33}, Size{5, 6, 0}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        // Leading dimensions wider than the matrices, as for strided views.
        GemmOperands product(backend(), {size.m, size.n, size.k, ta, tb, 3},
                             0.5f, seed += 3);
        ops().Gemm(product.args);
        ExpectClose(product.device_c->Read(), product.Expected(), 2e-5, "Gemm");
      }
    }
  }
}

TEST_P(OpsConformanceTest, GroupedGemmMatchesEachProductAlone) {
  // Skewed experts, as routing makes them: a large one, an empty one, small
  // ones; mixed transposes; beta 0 (c uninitialised) and 1 (accumulate).
  const std::vector<GemmShape> shapes = {
      {300, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {0, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {7, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {1, 48, 32, Transpose::kNo, Transpose::kYes, 0},
      {16, 24, 9, Transpose::kYes, Transpose::kNo, 0},
      {64, 48, 32, Transpose::kNo, Transpose::kYes, 0}};
  std::vector<std::unique_ptr<GemmOperands>> products;
  std::vector<GemmArgs> problems;
  for (size_t i = 0; i < shapes.size(); ++i) {
    products.push_back(std::make_unique<GemmOperands>(
        backend(), shapes[i], i % 2 == 0 ? 0.0f : 1.0f, 10 * (i + 1)));
    problems.push_back(products.back()->args);
  }
  ops().GroupedGemm(problems);
  for (const std::unique_ptr<GemmOperands>& product : products) {
    ExpectClose(product->device_c->Read(), product->Expected(), 2e-5,
                "GroupedGemm");
  }
}

}  // namespace
}  // namespace plateau::kernels::conformance
