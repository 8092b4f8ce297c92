#include "kernels/cuda/launch_geometry.h"

#include "gtest/gtest.h"

namespace plateau::kernels::cuda {
namespace {

TEST(LaunchGeometryTest, GridStrideBlocksCoverSmallCountsAndCapLargeOnes) {
  EXPECT_EQ(GridStrideBlocks(0), 1);
  EXPECT_EQ(GridStrideBlocks(1), 1);
  EXPECT_EQ(GridStrideBlocks(256), 1);
  EXPECT_EQ(GridStrideBlocks(257), 2);
  EXPECT_EQ(GridStrideBlocks(int64_t{1} << 40), kMaxGridStrideBlocks);
}

TEST(LaunchGeometryTest, RowBlocksAreWholeWarps) {
  EXPECT_EQ(RowBlockThreads(1), 32);
  EXPECT_EQ(RowBlockThreads(33), 64);
  EXPECT_EQ(RowBlockThreads(100000), kBlockThreads);
}

TEST(LaunchGeometryTest, ReductionBlocksAreBounded) {
  EXPECT_EQ(ReductionBlocks(0), 1);
  EXPECT_EQ(ReductionBlocks(2048), 1);
  EXPECT_EQ(ReductionBlocks(2049), 2);
  EXPECT_EQ(ReductionBlocks(int64_t{1} << 40), kMaxReductionBlocks);
}

TEST(LaunchGeometryTest, RowPartsCoverEveryRowInAtMostTheMaximum) {
  for (int64_t rows : {0, 1, 63, 64, 65, 16384, 16385, 1000000, 123456789}) {
    const RowParts parts = RowPartsOf(rows);
    EXPECT_GE(parts.parts, 1) << rows;
    EXPECT_LE(parts.parts, kMaxRowParts) << rows;
    EXPECT_GE(parts.parts * parts.rows_per_part, rows) << rows;
    EXPECT_LT((parts.parts - 1) * parts.rows_per_part,
              std::max<int64_t>(rows, 1))
        << rows;
  }
}

TEST(LaunchGeometryTest, SortPassesAndScratch) {
  EXPECT_EQ(KeyBits(1), 0);
  EXPECT_EQ(KeyBits(2), 1);
  EXPECT_EQ(KeyBits(256), 8);
  EXPECT_EQ(KeyBits(257), 9);
  EXPECT_EQ(SortPasses(0), 1);
  EXPECT_EQ(SortPasses(8), 1);
  EXPECT_EQ(SortPasses(9), 2);
  EXPECT_EQ(SortPasses(31), 4);
  EXPECT_EQ(SortTiles(1), 1);
  EXPECT_EQ(SortTiles(kSortTileItems + 1), 2);
  EXPECT_EQ(SortScratchInts(10), 40 + kSortBuckets);
}

TEST(LaunchGeometryTest, AttentionLanesHoldTheHead) {
  EXPECT_EQ(AttentionLaneElements(16), 1);
  EXPECT_EQ(AttentionLaneElements(32), 1);
  EXPECT_EQ(AttentionLaneElements(40), 2);
  EXPECT_EQ(AttentionLaneElements(128), 4);
  EXPECT_EQ(AttentionLaneElements(kMaxAttentionHeadDim), 16);
}

TEST(LaunchGeometryTest, TieredPiecesSplitSlicesInOrder) {
  TieredSlice slices[3];
  slices[0].count = 10;
  slices[1].count = 0;
  slices[2].count = 2 * kTieredPieceElements + 1;
  const std::vector<SlicePiece> pieces = TieredPieces(slices, 3);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].slice, 0);
  EXPECT_EQ(pieces[0].end, 10);
  EXPECT_EQ(pieces[1].slice, 2);
  EXPECT_EQ(pieces[3].begin, 2 * kTieredPieceElements);
  EXPECT_EQ(pieces[3].end, 2 * kTieredPieceElements + 1);
}

TEST(LaunchGeometryTest, SquaresTasksCountTouchedRowsAndColumns) {
  TieredSlice within_a_row, across_rows, empty;
  within_a_row.rows = 4;
  within_a_row.columns = 10;
  within_a_row.first_element = 12;  // row 1, columns 2..5
  within_a_row.count = 4;
  across_rows = within_a_row;
  across_rows.first_element = 7;  // row 0 column 7 .. row 2 column 1
  across_rows.count = 15;
  empty.columns = 10;
  const TieredSlice slices[] = {within_a_row, empty, across_rows};
  const SquaresTasks tasks = TieredSquaresTasks(slices, 3);
  EXPECT_EQ(tasks.row_task_starts, (std::vector<int64_t>{0, 1, 1, 4}));
  EXPECT_EQ(tasks.column_task_starts, (std::vector<int64_t>{0, 4, 4, 14}));
  const SliceExtent extent = ExtentOf(across_rows);
  EXPECT_EQ(extent.first_row, 0);
  EXPECT_EQ(extent.last_row, 2);
  EXPECT_EQ(extent.first_column, 7);
  EXPECT_EQ(extent.last_column, 1);
}

}  // namespace
}  // namespace plateau::kernels::cuda
