// How the CUDA kernels split their work into blocks and what scratch each
// needs: host arithmetic shared by the launchers (kernels.h) and CudaOps, and
// unit-tested on machines without a GPU. Every grid it gives is one CUDA
// accepts (at most 2^31 - 1 blocks in x, 65535 in y).
#ifndef PLATEAU_KERNELS_CUDA_LAUNCH_GEOMETRY_H_
#define PLATEAU_KERNELS_CUDA_LAUNCH_GEOMETRY_H_

#include <cstdint>
#include <vector>

#include "kernels/tiered_update.h"

namespace plateau::kernels::cuda {

inline constexpr int kBlockThreads = 256;

// Elementwise kernels loop over `count` with the whole grid's stride.
inline constexpr int64_t kMaxGridStrideBlocks = 4096;
int64_t GridStrideBlocks(int64_t count);

// Kernels with one block per row of `columns`: a multiple of 32 threads
// (the block reductions need whole warps), at most kBlockThreads.
int RowBlockThreads(int64_t columns);

// Sum and SumOfSquares: the first pass's blocks, one float64 partial each.
inline constexpr int64_t kMaxReductionBlocks = 1024;
int64_t ReductionBlocks(int64_t count);

// Column sums (ColumnSums, RMSNorm's weight gradient) over parts of
// consecutive rows, one partial row per part, added in part order.
struct RowParts {
  int64_t parts = 1;
  int64_t rows_per_part = 1;
};
inline constexpr int64_t kMaxRowParts = 256;
RowParts RowPartsOf(int64_t rows);

// The stable radix sort (sort.cu): 8 bits a pass, tiles of kSortTileItems.
inline constexpr int kSortRadixBits = 8;
inline constexpr int kSortBuckets = 1 << kSortRadixBits;
inline constexpr int kSortItemsPerThread = 16;
inline constexpr int64_t kSortTileItems =
    int64_t{kSortBuckets} * kSortItemsPerThread;
int64_t SortTiles(int64_t items);
// At least one pass, so that the sort also writes its output for 0 bits.
int SortPasses(int key_bits);
// Two key and position buffers, and the tiles' bucket counts.
int64_t SortScratchInts(int64_t items);
// Bits that hold every key in [0, key_limit).
int KeyBits(int64_t key_limit);

// Attention (attention.cu): one warp per query (backward: per key too),
// each lane holding head_dim / 32 elements of its row, rounded up to a power
// of two.
inline constexpr int64_t kMaxAttentionHeadDim = 512;
inline constexpr int kAttentionWarpsPerBlock = 4;
int AttentionLaneElements(int64_t head_dim);

// The tiered optimizer passes (tiered_update.cu): one block per piece.
struct SlicePiece {
  int64_t slice = 0;
  int64_t begin = 0;
  int64_t end = 0;
};
inline constexpr int64_t kTieredPieceElements = 16384;
std::vector<SlicePiece> TieredPieces(const TieredSlice* slices,
                                     int64_t slice_count);

// AccumulateSquares: one task per row a slice touches (a warp sums the row)
// and one per column (a thread sums it down the rows): starts[s] is slice s's
// first task, starts[slice_count] the total.
struct SquaresTasks {
  std::vector<int64_t> row_task_starts;
  std::vector<int64_t> column_task_starts;
};
SquaresTasks TieredSquaresTasks(const TieredSlice* slices, int64_t slice_count);

// The rows and columns a slice's elements touch.
struct SliceExtent {
  int64_t first_row = 0;
  int64_t last_row = -1;
  int64_t first_column = 0;  // of the first row
  int64_t last_column = 0;   // of the last row
};
SliceExtent ExtentOf(const TieredSlice& slice);

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_LAUNCH_GEOMETRY_H_
