#include "kernels/cpu/blas.h"

#include "gtest/gtest.h"

namespace plateau::kernels::cpu {
namespace {

TEST(BlasTest, LoadsTheInstalledOpenBlas) {
  ASSERT_TRUE(BlasStatus().ok()) << BlasStatus();
  const float x[3] = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(Blas().sdot(3, x, 1, x, 1), 14.0f);
  EXPECT_NE(Blas().corename(), nullptr);
}

TEST(BlasTest, MissingLibraryIsAStatusNamingTheFix) {
  const absl::StatusOr<OpenBlas> blas =
      LoadOpenBlas("libplateau-no-such-blas.so.0");
  ASSERT_FALSE(blas.ok());
  EXPECT_EQ(blas.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(blas.status().message().find("cannot load OpenBLAS"),
            absl::string_view::npos)
      << blas.status();
  EXPECT_NE(blas.status().message().find("deploy/install-deps.sh"),
            absl::string_view::npos)
      << blas.status();
}

TEST(BlasTest, LibraryWithoutTheEntryPointsIsAStatus) {
  // libm loads but has no cblas_sgemm.
  const absl::StatusOr<OpenBlas> blas = LoadOpenBlas("libm.so.6");
  ASSERT_FALSE(blas.ok());
  EXPECT_EQ(blas.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(blas.status().message().find("lacks cblas_sgemm"),
            absl::string_view::npos)
      << blas.status();
}

TEST(BlasDeathTest, FatalErrorPrintsTheMessageAndAborts) {
  EXPECT_DEATH(BlasFatalError("cannot load OpenBLAS (test)"),
               "plateau: cannot load OpenBLAS \\(test\\)");
}

}  // namespace
}  // namespace plateau::kernels::cpu
