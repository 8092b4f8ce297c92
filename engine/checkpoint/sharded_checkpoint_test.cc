#include "engine/checkpoint/sharded_checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fault_injecting_file_system.h"
#include "common/file_util.h"
#include "common/test_files.h"
#include "engine/checkpoint/checkpoint.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;
using Shapes = std::map<std::string, std::vector<int64_t>>;

// Element i of every test tensor: distinct across tensors.
float ValueOf(const std::string& name, int64_t i) {
  return static_cast<float>(name.size() * 100000 + i);
}

int64_t ElementsOf(const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (const int64_t dimension : shape) elements *= dimension;
  return elements;
}

// A layout of `ranks` ranks: each tensor cut into consecutive ranges, rank
// r holding the r-th (an uneven split; a rank may hold nothing of a small
// tensor).
std::vector<std::map<std::string, std::pair<int64_t, int64_t>>> Split(
    const Shapes& shapes, int ranks, int64_t skew) {
  std::vector<std::map<std::string, std::pair<int64_t, int64_t>>> owned(ranks);
  for (const auto& [name, shape] : shapes) {
    const int64_t elements = ElementsOf(shape);
    int64_t begin = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      int64_t end = elements * (rank + 1) / ranks;
      if (rank + 1 < ranks) end = std::min(elements, end + skew * (rank % 3));
      end = std::max(end, begin);
      if (end > begin) owned[rank][name] = {begin, end};
      begin = end;
    }
  }
  return owned;
}

// Each rank's chunks with their values, as a rank's snapshot holds them.
struct RankShard {
  std::vector<std::vector<float>> values;
  ShardContents contents;
};

RankShard ShardOf(
    const Shapes& shapes,
    const std::map<std::string, std::pair<int64_t, int64_t>>& owned,
    bool optimizer_too) {
  RankShard shard;
  shard.values.reserve(2 * owned.size());
  for (const auto& [name, range] : owned) {
    for (const bool optimizer : {false, true}) {
      if (optimizer && !optimizer_too) continue;
      const std::string stored = optimizer ? name + ".exp_avg" : name;
      std::vector<float>& values = shard.values.emplace_back();
      for (int64_t i = range.first; i < range.second; ++i) {
        values.push_back(ValueOf(stored, i));
      }
      (optimizer ? shard.contents.optimizer_state : shard.contents.weights)
          .push_back({stored, shapes.at(name), range.first,
                      range.second - range.first, values.data()});
    }
  }
  return shard;
}

CheckpointShapes ExpectedOf(const Shapes& shapes) {
  CheckpointShapes expected;
  expected.weights = shapes;
  for (const auto& [name, shape] : shapes) {
    expected.optimizer_state[name + ".exp_avg"] = shape;
  }
  return expected;
}

const Shapes kShapes = {{"a", {1000, 3}}, {"b", {7}}, {"c", {4096}}};
constexpr int64_t kBlockBytes = 64;

// Writes and commits step `step` of run_dir from `ranks` ranks.
std::string WriteSharded(const std::string& run_dir, int64_t step, int ranks,
                         int64_t skew = 0) {
  const std::string staging =
      ShardStagingDirectory(run_dir, step, absl::StrCat("test-", step));
  const auto owned = Split(kShapes, ranks, skew);
  for (int rank = 0; rank < ranks; ++rank) {
    const RankShard shard = ShardOf(kShapes, owned[rank], true);
    ShardWriteOptions options;
    options.block_bytes = kBlockBytes;
    const absl::StatusOr<ShardWriteResult> written =
        WriteCheckpointShard(staging, rank, shard.contents, options);
    EXPECT_TRUE(written.ok()) << written.status();
  }
  const absl::StatusOr<std::string> committed = CommitShardedCheckpoint(
      run_dir, step, staging, ranks, ExpectedOf(kShapes),
      absl::StrCat("{\"step\": ", step, "}"));
  EXPECT_TRUE(committed.ok()) << committed.status();
  return committed.ok() ? *committed : "";
}

// Any layout's ranges read back exactly, and each read touches at most its
// elements plus two blocks per chunk it meets.
TEST(ShardedCheckpointTest, EveryLayoutReadsBackWhatAnotherWrote) {
  const std::string run_dir = MakeTestDirectory("sharded");
  const std::string directory = WriteSharded(run_dir, 5, 3, /*skew=*/37);
  EXPECT_EQ(ListTestDirectory(directory),
            (std::vector<std::string>{
                "MANIFEST.json", "model.rank-00000.safetensors",
                "model.rank-00001.safetensors", "model.rank-00002.safetensors",
                "optimizer.rank-00000.safetensors",
                "optimizer.rank-00001.safetensors",
                "optimizer.rank-00002.safetensors", "state.json"}));
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(directory);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->version(), 2);
  EXPECT_EQ((*checkpoint)->step(), 5);
  EXPECT_EQ((*checkpoint)->state_json(), "{\"step\": 5}");
  for (const int ranks : {1, 2, 5}) {
    for (const auto& owned : Split(kShapes, ranks, 11)) {
      // Each rank of the new layout opens the checkpoint itself.
      absl::StatusOr<std::unique_ptr<Checkpoint>> opened =
          Checkpoint::Open(directory);
      ASSERT_TRUE(opened.ok()) << opened.status();
      for (const CheckpointPart part : kCheckpointParts) {
        const TensorSource& source = (*opened)->part(part);
        int64_t owned_bytes = 0;
        for (const auto& [name, range] : owned) {
          const std::string stored =
              part == CheckpointPart::kWeights ? name : name + ".exp_avg";
          const int64_t count = range.second - range.first;
          owned_bytes += count * 4;
          std::vector<float> values(count);
          // In two reads: the block they share is checked once.
          const int64_t half = count / 2;
          ASSERT_TRUE(
              source.Read(stored, range.first, half, values.data()).ok());
          ASSERT_TRUE(source
                          .Read(stored, range.first + half, count - half,
                                values.data() + half)
                          .ok());
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(values[i], ValueOf(stored, range.first + i))
                << stored << " element " << range.first + i;
          }
        }
        EXPECT_GE(source.bytes_read(), owned_bytes);
        // Each of the 3 tensors' ranges meets at most the writers' 3
        // chunks, each read past the range by at most a block at each end.
        EXPECT_LE(source.bytes_read(), owned_bytes + 3 * 3 * 2 * kBlockBytes);
      }
    }
  }
  // The shard files are safetensors: a part of a tensor is stored 1-D under
  // its range, a whole one under its own name and shape.
  const std::unique_ptr<SafetensorsReader> rank_1 =
      *SafetensorsReader::Open(directory + "/model.rank-00001.safetensors");
  EXPECT_EQ(rank_1->Find("a"), nullptr);
  ASSERT_NE(rank_1->Find("a[1000:2037]"), nullptr);
  EXPECT_EQ(rank_1->Find("a[1000:2037]")->shape, (std::vector<int64_t>{1037}));
  const std::unique_ptr<SafetensorsReader> alone = *SafetensorsReader::Open(
      WriteSharded(run_dir, 6, 1) + "/model.rank-00000.safetensors");
  ASSERT_NE(alone->Find("a"), nullptr);
  EXPECT_EQ(alone->Find("a")->shape, (std::vector<int64_t>{1000, 3}));
}

// The index logic at 1,024 ranks, without training or tensor data: every
// rank's fragment merges into an index, and under three other layouts the
// planned reads cover every element exactly once, each rank's bytes at most
// what it owns plus two blocks per chunk it meets.
TEST(ShardedCheckpointTest, IndexPlansReadsAt1024Ranks) {
  const Shapes shapes = {{"embed.weight", {129280, 64}},
                         {"layers.0.moe.experts.w1", {256, 64, 32}},
                         {"final_norm.weight", {64}}};
  const std::string staging = MakeTestDirectory("index-1024");
  const auto written = Split(shapes, 1024, 5);
  for (int rank = 0; rank < 1024; ++rank) {
    nlohmann::json fragment = {{"rank", rank},
                               {"block_bytes", 4096},
                               {"files", nlohmann::json::array()},
                               {"weights", nlohmann::json::object()},
                               {"optimizer_state", nlohmann::json::object()}};
    int64_t offset = 8;
    for (const auto& [name, range] : written[rank]) {
      const int64_t bytes = (range.second - range.first) * 4;
      fragment["weights"][name]["shape"] = shapes.at(name);
      fragment["weights"][name]["chunks"].push_back(
          {{"begin", range.first},
           {"end", range.second},
           {"file", absl::StrFormat("model.rank-%05d.safetensors", rank)},
           {"offset", offset},
           {"crc32", std::vector<uint32_t>((bytes + 4095) / 4096, 0)}});
      offset += bytes;
    }
    WriteTestFile(absl::StrFormat("%s/rank-%05d.json", staging, rank),
                  fragment.dump());
  }
  CheckpointShapes expected;
  expected.weights = shapes;
  absl::StatusOr<MergedShards> merged =
      MergeShardFragments(staging, 1024, expected);
  ASSERT_TRUE(merged.ok()) << merged.status();
  nlohmann::json manifest = {
      {"block_bytes", merged->block_bytes},
      {"weights", nlohmann::json::parse(merged->parts["weights"].dump())},
      {"optimizer_state", nlohmann::json::object()}};
  absl::StatusOr<ShardedIndex> index = ParseShardedIndex(manifest);
  ASSERT_TRUE(index.ok()) << index.status();
  for (const int ranks : {1000, 512, 7}) {
    SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
    std::map<std::string, std::vector<int64_t>> times_read;
    for (const auto& [name, shape] : shapes) {
      times_read[name].assign(ElementsOf(shape), 0);
    }
    for (const auto& owned : Split(shapes, ranks, 3)) {
      int64_t owned_bytes = 0;
      int64_t allowance = 0;
      int64_t planned = 0;
      for (const auto& [name, range] : owned) {
        owned_bytes += (range.second - range.first) * 4;
        const IndexedTensor& tensor = index->weights.at(name);
        for (const PlannedRead& read :
             PlanRead(tensor, 4096, range.first, range.second)) {
          planned += read.bytes;
          allowance += 2 * 4096;
          const int64_t first = std::max(range.first, read.chunk->begin);
          const int64_t last = std::min(range.second, read.chunk->end);
          for (int64_t i = first; i < last; ++i) ++times_read[name][i];
          // The blocks hold the part of the chunk that is read.
          EXPECT_LE(read.first_block * 4096, (first - read.chunk->begin) * 4);
          EXPECT_GE(read.first_block * 4096 + read.bytes,
                    (last - read.chunk->begin) * 4);
        }
      }
      EXPECT_LE(planned, owned_bytes + allowance);
    }
    for (const auto& [name, counts] : times_read) {
      const auto wrong = std::find_if(counts.begin(), counts.end(),
                                      [](int64_t n) { return n != 1; });
      EXPECT_EQ(wrong, counts.end())
          << name << " element " << (wrong - counts.begin());
    }
  }
}

// A bad block is named by file, tensor and byte range; a truncated file by
// name when the checkpoint is opened; the reads that do not touch the bad
// block still work.
TEST(ShardedCheckpointTest, DamageIsNamedByFileTensorAndByteRange) {
  const std::string run_dir = MakeTestDirectory("sharded-damage");
  const std::string directory = WriteSharded(run_dir, 2, 2);
  const std::string file = directory + "/model.rank-00001.safetensors";
  std::string bytes = ReadTestFile(file);
  bytes[bytes.size() - 3] ^= 0x10;
  WriteTestFile(file, bytes);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(directory);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::vector<float> values(4096);
  // "c" [4096] is the last tensor: rank 1 holds [2048, 4096).
  const absl::Status bad =
      (*checkpoint)->weights().Read("c", 0, 4096, values.data());
  EXPECT_TRUE(absl::IsDataLoss(bad)) << bad;
  const int64_t end = static_cast<int64_t>(bytes.size());
  EXPECT_NE(bad.message().find(absl::StrCat(file, ": bytes [",
                                            end - kBlockBytes, ", ", end,
                                            ") of c (its "
                                            "elements [",
                                            4096 - kBlockBytes / 4,
                                            ", 4096)) fail their "
                                            "CRC-32")),
            std::string::npos)
      << bad;
  EXPECT_TRUE((*checkpoint)->weights().Read("c", 0, 4000, values.data()).ok());

  // A shard file is opened when first read: rank 0's reads do not need
  // rank 1's file, and a read that does finds it short.
  bytes.resize(bytes.size() - 10);
  WriteTestFile(file, bytes);
  checkpoint = Checkpoint::Open(directory);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE((*checkpoint)->weights().Read("c", 0, 2048, values.data()).ok());
  const absl::Status truncated =
      (*checkpoint)->weights().Read("c", 2048, 10, values.data());
  EXPECT_TRUE(absl::IsDataLoss(truncated)) << truncated;
  EXPECT_NE(truncated.message().find(absl::StrCat(
                file, " has ", bytes.size(), " bytes but the manifest lists ",
                bytes.size() + 10)),
            std::string::npos)
      << truncated;
}

// The commit stores nothing unless every element of every expected tensor
// is stored exactly once and every rank's fragment is there; the previous
// checkpoint then stays the newest.
TEST(ShardedCheckpointTest, CommitRefusesMissingOverlappingOrForeignChunks) {
  const std::string run_dir = MakeTestDirectory("sharded-commit");
  WriteSharded(run_dir, 1, 2);
  const auto owned = Split(kShapes, 2, 0);
  struct Case {
    std::string name;
    int ranks_written;
    std::map<std::string, std::pair<int64_t, int64_t>> rank_1;
    std::string error;
  };
  auto grown = owned[1];
  grown["c"].first -= 10;
  auto foreign = owned[1];
  foreign["d"] = {0, 4};
  const std::vector<Case> cases = {
      {"a rank died before its fragment", 1, owned[1],
       "rank 1's part of the checkpoint is missing"},
      {"overlap", 2, grown, "weights 'c': its chunks overlap at element 2038"},
      {"gap",
       2,
       {{"a", owned[1].at("a")}, {"b", owned[1].at("b")}},
       "weights 'c': its chunks store 2048 of its 4096 elements"},
      {"not the model's", 2, foreign,
       "weights 'd' was stored but is not the model's"}};
  int64_t step = 2;
  for (const Case& test : cases) {
    SCOPED_TRACE(test.name);
    const std::string staging = ShardStagingDirectory(run_dir, step, "attempt");
    ASSERT_TRUE(WriteCheckpointShard(staging, 0,
                                     ShardOf(kShapes, owned[0], true).contents)
                    .ok());
    Shapes shapes = kShapes;
    shapes["d"] = {4};
    if (test.ranks_written == 2) {
      ASSERT_TRUE(WriteCheckpointShard(
                      staging, 1, ShardOf(shapes, test.rank_1, true).contents)
                      .ok());
    }
    const absl::StatusOr<std::string> committed = CommitShardedCheckpoint(
        run_dir, step, staging, 2, ExpectedOf(kShapes), "{}");
    EXPECT_FALSE(committed.ok());
    EXPECT_NE(committed.status().message().find(test.error), std::string::npos)
        << committed.status();
    absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
        OpenLatestCheckpoint(run_dir);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ((*latest)->step(), 1);
    ++step;
  }
  // The failed writes left nothing behind but the one checkpoint.
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints"),
            std::vector<std::string>{"step-00000001"});
}

// A rank's write failing at any step (full disk, EIO, a short write, a
// crash): a commit of what it left (which the trainer does not even try)
// fails, or commits a checkpoint whose every block verifies; never a
// complete-looking damaged one. The next commit removes what the failed
// writes left.
TEST(ShardedCheckpointTest, AFailedShardWriteCommitsNothing) {
  const std::string run_dir = MakeTestDirectory("sharded-fault");
  WriteSharded(run_dir, 1, 2);
  const auto owned = Split(kShapes, 2, 0);
  const RankShard rank_1 = ShardOf(kShapes, owned[1], true);
  int64_t steps = 0;
  {
    FaultInjectingFileSystem counting;
    ShardWriteOptions options;
    options.file_system = &counting;
    ASSERT_TRUE(WriteCheckpointShard(ShardStagingDirectory(run_dir, 2, "count"),
                                     1, rank_1.contents, options)
                    .ok());
    steps = counting.steps();
  }
  ASSERT_GT(steps, 10);
  int64_t newest = 1;
  int64_t checkpoint_step = 2;
  for (int64_t step = 1; step <= steps; ++step) {
    for (const StorageFault fault :
         {StorageFault::kNoSpace, StorageFault::kIoError,
          StorageFault::kShortWrite, StorageFault::kCrash}) {
      SCOPED_TRACE(absl::StrCat("step ", step, " ", StorageFaultName(fault)));
      FaultInjectingFileSystem file_system;
      file_system.InjectAt(step, fault);
      ShardWriteOptions options;
      options.file_system = &file_system;
      ++checkpoint_step;
      const std::string staging = ShardStagingDirectory(
          run_dir, checkpoint_step, absl::StrCat("f", step));
      ASSERT_TRUE(WriteCheckpointShard(
                      staging, 0, ShardOf(kShapes, owned[0], true).contents)
                      .ok());
      if (WriteCheckpointShard(staging, 1, rank_1.contents, options).ok()) {
        continue;  // a fault in a step that does not matter
      }
      if (CommitShardedCheckpoint(run_dir, checkpoint_step, staging, 2,
                                  ExpectedOf(kShapes), "{}")
              .ok()) {
        newest = checkpoint_step;
      }
      absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
          OpenLatestCheckpoint(run_dir);
      ASSERT_TRUE(latest.ok()) << latest.status();
      EXPECT_EQ((*latest)->step(), newest);
      for (const CheckpointPart part : kCheckpointParts) {
        for (const auto& [name, info] : (*latest)->part(part).Tensors()) {
          std::vector<float> values(ElementsOf(info.shape));
          const absl::Status read = (*latest)->part(part).Read(
              name, 0, ElementsOf(info.shape), values.data());
          EXPECT_TRUE(read.ok()) << read;
        }
      }
    }
  }
  const std::string last = WriteSharded(run_dir, checkpoint_step + 1, 2);
  const std::vector<std::string> left =
      ListTestDirectory(run_dir + "/checkpoints");
  EXPECT_EQ(run_dir + "/checkpoints/" + left.back(), last);
  EXPECT_TRUE(
      std::none_of(left.begin(), left.end(),
                   [](const std::string& name) { return name[0] == '.'; }));
}

}  // namespace
}  // namespace plateau::engine
