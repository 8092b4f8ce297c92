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

void CudaOps::AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                          float* params, const float* grads,
                          float* first_moment, float* second_moment) {
  if (failed()) return;
  Check(LaunchAdamWUpdate(coefficients, count, params, grads, first_moment,
                          second_moment, compute_stream_),
        "AdamWUpdate");
}

void CudaOps::SquareRoots(int64_t count, float scale, const float* x,
                          float* out) {
  if (failed()) return;
  Check(LaunchSquareRoots(count, scale, x, out, compute_stream_),
        "SquareRoots");
}

CudaOps::HostBytes CudaOps::SlicesBytes(absl::Span<const TieredSlice> slices) {
  return {slices.data(),
          static_cast<int64_t>(slices.size() * sizeof(TieredSlice))};
}

CudaOps::HostBytes CudaOps::PiecesBytes(const std::vector<SlicePiece>& pieces) {
  return {pieces.data(),
          static_cast<int64_t>(pieces.size() * sizeof(SlicePiece))};
}

std::vector<char*> CudaOps::UploadAll(std::initializer_list<HostBytes> arrays,
                                      int64_t output_bytes, const char* what) {
  ScratchLayout layout;
  std::vector<int64_t> offsets;
  for (const HostBytes& array : arrays) {
    offsets.push_back(layout.Add<char>(array.bytes));
  }
  offsets.push_back(layout.Add<char>(output_bytes));
  char* scratch = Scratch(layout.bytes(), what);
  if (scratch == nullptr) return {};
  std::vector<char*> places;
  for (const HostBytes& array : arrays) {
    places.push_back(scratch + offsets[places.size()]);
    if (!Upload(array.data, array.bytes, places.back(), what)) return {};
  }
  places.push_back(scratch + offsets.back());
  return places;
}

void CudaOps::AccumulateSquares(absl::Span<const TieredSlice> slices) {
  if (failed() || slices.empty()) return;
  const int64_t count = static_cast<int64_t>(slices.size());
  const SquaresTasks tasks = TieredSquaresTasks(slices.data(), count);
  const int64_t starts_bytes = (count + 1) * int64_t{sizeof(int64_t)};
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices),
                 {tasks.row_task_starts.data(), starts_bytes},
                 {tasks.column_task_starts.data(), starts_bytes}},
                0, "AccumulateSquares");
  if (places.empty()) return;
  Check(LaunchAccumulateSquares(
            At<TieredSlice>(places[0], 0), count, At<int64_t>(places[1], 0),
            At<int64_t>(places[2], 0), tasks.row_task_starts.back(),
            tasks.column_task_starts.back(), compute_stream_),
        "AccumulateSquares");
}

void CudaOps::TieredMeasure(const TieredCoefficients& coefficients,
                            absl::Span<const TieredSlice> slices,
                            absl::Span<double> sums) {
  std::fill(sums.begin(), sums.end(), 0.0);
  if (failed() || slices.empty()) return;
  const std::vector<SlicePiece> pieces =
      TieredPieces(slices.data(), static_cast<int64_t>(slices.size()));
  const int64_t sum_bytes =
      static_cast<int64_t>(pieces.size() * sizeof(double));
  const std::vector<char*> places = UploadAll(
      {SlicesBytes(slices), PiecesBytes(pieces)}, sum_bytes, "TieredMeasure");
  if (places.empty()) return;
  std::vector<double> piece_sums(pieces.size(), 0.0);
  if (!Check(LaunchTieredMeasure(coefficients, At<TieredSlice>(places[0], 0),
                                 At<SlicePiece>(places[1], 0),
                                 static_cast<int64_t>(pieces.size()),
                                 At<double>(places[2], 0), compute_stream_),
             "TieredMeasure") ||
      !Download(places[2], sum_bytes, piece_sums.data(), "TieredMeasure")) {
    return;
  }
  // In piece order, as on the CPU.
  for (size_t p = 0; p < pieces.size(); ++p) {
    sums[pieces[p].slice] += piece_sums[p];
  }
}

void CudaOps::TieredApply(const TieredCoefficients& coefficients,
                          absl::Span<const TieredSlice> slices) {
  if (failed() || slices.empty()) return;
  const std::vector<SlicePiece> pieces =
      TieredPieces(slices.data(), static_cast<int64_t>(slices.size()));
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices), PiecesBytes(pieces)}, 0, "TieredApply");
  if (places.empty()) return;
  Check(LaunchTieredApply(coefficients, At<TieredSlice>(places[0], 0),
                          At<SlicePiece>(places[1], 0),
                          static_cast<int64_t>(pieces.size()), compute_stream_),
        "TieredApply");
}

void CudaOps::TieredUpdate(const TieredCoefficients& coefficients,
                           absl::Span<const TieredSlice> slices,
                           float clip_threshold) {
  if (failed() || slices.empty()) return;
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices)}, 0, "TieredUpdate");
  if (places.empty()) return;
  Check(LaunchTieredUpdate(coefficients, At<TieredSlice>(places[0], 0),
                           static_cast<int64_t>(slices.size()), clip_threshold,
                           compute_stream_),
        "TieredUpdate");
}

void CudaOps::LionUpdate(const TieredCoefficients& coefficients,
                         absl::Span<const TieredSlice> slices) {
  if (failed() || slices.empty()) return;
  const std::vector<SlicePiece> pieces =
      TieredPieces(slices.data(), static_cast<int64_t>(slices.size()));
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices), PiecesBytes(pieces)}, 0, "LionUpdate");
  if (places.empty()) return;
  Check(LaunchLionUpdate(coefficients, At<TieredSlice>(places[0], 0),
                         At<SlicePiece>(places[1], 0),
                         static_cast<int64_t>(pieces.size()), compute_stream_),
        "LionUpdate");
}

}  // namespace plateau::kernels::cuda
