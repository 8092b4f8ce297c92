#include "gtest/gtest.h"

namespace plateau {
namespace {

TEST(CudaToolkit, Absent) {
  GTEST_SKIP() << "built without the CUDA toolkit (bazel/cuda_configure.bzl "
                  "looks for bin/nvcc under $CUDA_PATH, else /usr/local/cuda)";
}

}  // namespace
}  // namespace plateau
