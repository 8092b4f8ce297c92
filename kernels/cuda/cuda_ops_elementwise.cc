#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {

void CudaOps::Fill(int64_t count, float value, float* x) {
  if (!failed()) Check(LaunchFill(count, value, x, compute_stream_), "Fill");
}

void CudaOps::Copy(int64_t count, const float* source, float* destination) {
  if (failed() || count == 0) return;
  Check(cudaMemcpyAsync(destination, source,
                        static_cast<size_t>(count) * sizeof(float),
                        cudaMemcpyDeviceToDevice, compute_stream_),
        "Copy");
}

void CudaOps::CopyBf16(int64_t count, const uint16_t* source,
                       uint16_t* destination) {
  if (failed() || count == 0) return;
  Check(cudaMemcpyAsync(destination, source,
                        static_cast<size_t>(count) * sizeof(uint16_t),
                        cudaMemcpyDeviceToDevice, compute_stream_),
        "CopyBf16");
}

void CudaOps::CopyToBf16(int64_t count, const float* x, uint16_t* out) {
  if (!failed()) {
    Check(LaunchCopyToBf16(count, x, out, compute_stream_), "CopyToBf16");
  }
}

void CudaOps::CopyMatrixToBf16(int64_t rows, int64_t columns, const float* x,
                               int64_t x_stride, uint16_t* out,
                               int64_t out_stride) {
  if (!failed()) {
    Check(LaunchCopyMatrixToBf16(rows, columns, x, x_stride, out, out_stride,
                                 compute_stream_),
          "CopyMatrixToBf16");
  }
}

void CudaOps::CopyFromBf16(int64_t count, const uint16_t* x, float* out) {
  if (!failed()) {
    Check(LaunchWidenBf16(count, x, out, compute_stream_), "CopyFromBf16");
  }
}

void CudaOps::Add(int64_t count, const float* a, const float* b, float* out) {
  if (!failed()) Check(LaunchAdd(count, a, b, out, compute_stream_), "Add");
}

void CudaOps::Scale(int64_t count, float factor, float* x) {
  if (!failed()) Check(LaunchScale(count, factor, x, compute_stream_), "Scale");
}

double CudaOps::ReduceSum(int64_t count, const float* x, bool squares,
                          const char* what) {
  if (failed()) return 0.0;
  ScratchLayout layout;
  const int64_t partials = layout.Add<double>(ReductionBlocks(count));
  const int64_t result = layout.Add<double>(1);
  char* scratch = Scratch(layout.bytes(), what);
  double sum = 0.0;
  if (scratch == nullptr ||
      !Check(LaunchSum(count, x, squares, At<double>(scratch, partials),
                       At<double>(scratch, result), compute_stream_),
             what) ||
      !Download(scratch + result, sizeof(double), &sum, what)) {
    return 0.0;
  }
  return sum;
}

double CudaOps::SumOfSquares(int64_t count, const float* x) {
  return ReduceSum(count, x, /*squares=*/true, "SumOfSquares");
}

double CudaOps::Sum(int64_t count, const float* x) {
  return ReduceSum(count, x, /*squares=*/false, "Sum");
}

void CudaOps::ColumnSums(int64_t rows, int64_t columns, const float* x,
                         absl::Span<double> column_sums) {
  std::fill(column_sums.begin(), column_sums.end(), 0.0);
  if (failed() || columns == 0) return;
  ScratchLayout layout;
  const int64_t partials = layout.Add<double>(RowPartsOf(rows).parts * columns);
  const int64_t sums = layout.Add<double>(columns);
  char* scratch = Scratch(layout.bytes(), "ColumnSums");
  if (scratch == nullptr ||
      !Check(LaunchColumnSums(rows, columns, x, At<double>(scratch, partials),
                              At<double>(scratch, sums), compute_stream_),
             "ColumnSums") ||
      !Download(scratch + sums, columns * int64_t{sizeof(double)},
                column_sums.data(), "ColumnSums")) {
    std::fill(column_sums.begin(), column_sums.end(), 0.0);
  }
}

// ---- Embedding, normalization, rotary ----

void CudaOps::EmbeddingForward(int64_t tokens, int64_t dim, const int32_t* ids,
                               const float* table, float* out) {
  if (failed()) return;
  Check(LaunchEmbeddingForward(tokens, dim, ids, table, out, compute_stream_),
        "EmbeddingForward");
}

void CudaOps::EmbeddingBackward(int64_t tokens, int64_t dim, const int32_t* ids,
                                const float* dout, float* dtable) {
  if (failed() || tokens == 0) return;
  char* scratch = Scratch(SortScratchInts(tokens) * int64_t{sizeof(int32_t)},
                          "EmbeddingBackward");
  if (scratch == nullptr) return;
  Check(LaunchEmbeddingBackward(tokens, dim, ids, dout, dtable,
                                At<int32_t>(scratch, 0), compute_stream_),
        "EmbeddingBackward");
}

void CudaOps::EmbeddingForwardBf16(int64_t tokens, int64_t dim,
                                   const int32_t* ids, const uint16_t* table,
                                   uint16_t* out) {
  if (failed()) return;
  Check(
      LaunchEmbeddingForwardBf16(tokens, dim, ids, table, out, compute_stream_),
      "EmbeddingForwardBf16");
}

void CudaOps::EmbeddingBackwardFromBf16(int64_t tokens, int64_t dim,
                                        const int32_t* ids,
                                        const uint16_t* dout, float* dtable) {
  if (failed() || tokens == 0) return;
  char* scratch = Scratch(SortScratchInts(tokens) * int64_t{sizeof(int32_t)},
                          "EmbeddingBackwardFromBf16");
  if (scratch == nullptr) return;
  Check(
      LaunchEmbeddingBackwardFromBf16(tokens, dim, ids, dout, dtable,
                                      At<int32_t>(scratch, 0), compute_stream_),
      "EmbeddingBackwardFromBf16");
}

void CudaOps::EmbeddingBackwardBf16(int64_t tokens, int64_t dim,
                                    const int32_t* ids, const uint16_t* dout,
                                    uint16_t* dtable) {
  if (failed() || tokens == 0) return;
  char* scratch = Scratch(SortScratchInts(tokens) * int64_t{sizeof(int32_t)},
                          "EmbeddingBackwardBf16");
  if (scratch == nullptr) return;
  Check(LaunchEmbeddingBackwardBf16(tokens, dim, ids, dout, dtable,
                                    At<int32_t>(scratch, 0), compute_stream_),
        "EmbeddingBackwardBf16");
}

void CudaOps::RmsNormForward(int64_t rows, int64_t dim, const float* x,
                             const float* weight, float epsilon, float* out,
                             float* inverse_rms) {
  if (failed()) return;
  Check(LaunchRmsNormForward(rows, dim, x, weight, epsilon, out, inverse_rms,
                             compute_stream_),
        "RmsNormForward");
}

void CudaOps::RmsNormForwardToBf16(int64_t rows, int64_t dim, const float* x,
                                   const float* weight, float epsilon,
                                   uint16_t* out, float* inverse_rms) {
  if (failed()) return;
  Check(LaunchRmsNormForwardToBf16(rows, dim, x, weight, epsilon, out,
                                   inverse_rms, compute_stream_),
        "RmsNormForwardToBf16");
}

void CudaOps::RmsNormForwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                                 const float* weight, float epsilon,
                                 uint16_t* out, float* inverse_rms) {
  if (failed()) return;
  Check(LaunchRmsNormForwardBf16(rows, dim, x, weight, epsilon, out,
                                 inverse_rms, compute_stream_),
        "RmsNormForwardBf16");
}

void CudaOps::RmsNormBackward(int64_t rows, int64_t dim, const float* x,
                              const float* weight, const float* inverse_rms,
                              const float* dout, float* dx, float* dweight) {
  if (failed() || rows == 0) return;
  char* scratch = Scratch(RowPartsOf(rows).parts * dim * int64_t{sizeof(float)},
                          "RmsNormBackward");
  if (scratch == nullptr) return;
  Check(LaunchRmsNormBackward(rows, dim, x, weight, inverse_rms, dout, dx,
                              dweight, At<float>(scratch, 0), compute_stream_),
        "RmsNormBackward");
}

void CudaOps::RmsNormBackwardToBf16(int64_t rows, int64_t dim, const float* x,
                                    const float* weight,
                                    const float* inverse_rms, const float* dout,
                                    uint16_t* dx, float* dweight) {
  if (failed() || rows == 0) return;
  char* scratch = Scratch(RowPartsOf(rows).parts * dim * int64_t{sizeof(float)},
                          "RmsNormBackwardToBf16");
  if (scratch == nullptr) return;
  Check(LaunchRmsNormBackward(rows, dim, x, weight, inverse_rms, dout, dx,
                              dweight, At<float>(scratch, 0), compute_stream_),
        "RmsNormBackwardToBf16");
}

void CudaOps::RmsNormBackwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                                  const float* weight, const float* inverse_rms,
                                  const float* dout, uint16_t* dx,
                                  float* dweight) {
  if (failed() || rows == 0) return;
  char* scratch = Scratch(RowPartsOf(rows).parts * dim * int64_t{sizeof(float)},
                          "RmsNormBackwardBf16");
  if (scratch == nullptr) return;
  Check(LaunchRmsNormBackward(rows, dim, x, weight, inverse_rms, dout, dx,
                              dweight, At<float>(scratch, 0), compute_stream_),
        "RmsNormBackwardBf16");
}

void CudaOps::HeadRmsNormForward(int64_t rows, int64_t heads, int64_t head_dim,
                                 int64_t row_stride, const float* weight,
                                 float epsilon, float* x) {
  if (failed()) return;
  Check(LaunchHeadRmsNormForward(rows, heads, head_dim, row_stride, weight,
                                 epsilon, x, compute_stream_),
        "HeadRmsNormForward");
}

void CudaOps::HeadRmsNormBackward(int64_t rows, int64_t heads, int64_t head_dim,
                                  const float* x, int64_t x_stride,
                                  const float* weight, float epsilon,
                                  int64_t row_stride, float* dx,
                                  float* dweight) {
  if (failed() || rows == 0) return;
  const int64_t floats = rows * heads + RowPartsOf(rows).parts * head_dim;
  char* scratch =
      Scratch(floats * int64_t{sizeof(float)}, "HeadRmsNormBackward");
  if (scratch == nullptr) return;
  Check(LaunchHeadRmsNormBackward(rows, heads, head_dim, x, x_stride, weight,
                                  epsilon, row_stride, dx, dweight,
                                  At<float>(scratch, 0), compute_stream_),
        "HeadRmsNormBackward");
}

void CudaOps::RotaryForward(int64_t rows, int64_t first_row, int64_t seq_len,
                            int64_t heads, int64_t head_dim, int64_t row_stride,
                            double theta, float* x) {
  if (failed()) return;
  Check(LaunchRotary(rows, first_row, seq_len, heads, head_dim, row_stride,
                     theta, 1.0f, x, compute_stream_),
        "RotaryForward");
}

void CudaOps::RotaryBackward(int64_t rows, int64_t first_row, int64_t seq_len,
                             int64_t heads, int64_t head_dim,
                             int64_t row_stride, double theta, float* dx) {
  if (failed()) return;
  Check(LaunchRotary(rows, first_row, seq_len, heads, head_dim, row_stride,
                     theta, -1.0f, dx, compute_stream_),
        "RotaryBackward");
}

}  // namespace plateau::kernels::cuda
