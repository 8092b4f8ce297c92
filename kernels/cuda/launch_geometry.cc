#include "kernels/cuda/launch_geometry.h"

#include <algorithm>

namespace plateau::kernels::cuda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t GridStrideBlocks(int64_t count) {
  return std::clamp<int64_t>(CeilDiv(count, kBlockThreads), 1,
                             kMaxGridStrideBlocks);
}

int RowBlockThreads(int64_t columns) {
  return static_cast<int>(
      std::clamp<int64_t>(CeilDiv(columns, 32) * 32, 32, kBlockThreads));
}

int64_t ReductionBlocks(int64_t count) {
  return std::clamp<int64_t>(CeilDiv(count, int64_t{kBlockThreads} * 8), 1,
                             kMaxReductionBlocks);
}

RowParts RowPartsOf(int64_t rows) {
  RowParts parts;
  parts.rows_per_part =
      std::max<int64_t>(64, CeilDiv(std::max<int64_t>(rows, 1), kMaxRowParts));
  parts.parts = std::max<int64_t>(1, CeilDiv(rows, parts.rows_per_part));
  return parts;
}

int64_t SortTiles(int64_t items) {
  return std::max<int64_t>(1, CeilDiv(items, kSortTileItems));
}

int SortPasses(int key_bits) {
  return std::max(1, (key_bits + kSortRadixBits - 1) / kSortRadixBits);
}

int64_t SortScratchInts(int64_t items) {
  return 4 * items + int64_t{kSortBuckets} * SortTiles(items);
}

int KeyBits(int64_t key_limit) {
  int bits = 0;
  while (bits < 62 && (int64_t{1} << bits) < key_limit) ++bits;
  return bits;
}

int AttentionLaneElements(int64_t head_dim) {
  int elements = 1;
  while (elements * 32 < head_dim) elements *= 2;
  return elements;
}

std::vector<SlicePiece> TieredPieces(const TieredSlice* slices,
                                     int64_t slice_count) {
  std::vector<SlicePiece> pieces;
  for (int64_t s = 0; s < slice_count; ++s) {
    for (int64_t begin = 0; begin < slices[s].count;
         begin += kTieredPieceElements) {
      pieces.push_back(
          {s, begin, std::min(begin + kTieredPieceElements, slices[s].count)});
    }
  }
  return pieces;
}

SliceExtent ExtentOf(const TieredSlice& slice) {
  SliceExtent extent;
  if (slice.count <= 0) return extent;
  const int64_t last_element = slice.first_element + slice.count - 1;
  extent.first_row = slice.first_element / slice.columns;
  extent.last_row = last_element / slice.columns;
  extent.first_column = slice.first_element % slice.columns;
  extent.last_column = last_element % slice.columns;
  return extent;
}

SquaresTasks TieredSquaresTasks(const TieredSlice* slices,
                                int64_t slice_count) {
  SquaresTasks tasks;
  tasks.row_task_starts.assign(slice_count + 1, 0);
  tasks.column_task_starts.assign(slice_count + 1, 0);
  for (int64_t s = 0; s < slice_count; ++s) {
    const SliceExtent extent = ExtentOf(slices[s]);
    const int64_t rows = extent.last_row - extent.first_row + 1;
    // Within one row only the slice's own columns; across rows any column.
    const int64_t columns = rows <= 0   ? 0
                            : rows == 1 ? slices[s].count
                                        : slices[s].columns;
    tasks.row_task_starts[s + 1] = tasks.row_task_starts[s] + rows;
    tasks.column_task_starts[s + 1] = tasks.column_task_starts[s] + columns;
  }
  return tasks;
}

}  // namespace plateau::kernels::cuda
