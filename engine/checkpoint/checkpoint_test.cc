#include "engine/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/test_files.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;
using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;

// A tiny model and optimizer whose values all derive from `value`.
class TrainingState {
 public:
  explicit TrainingState(float value)
      : embed_(12, value), lm_head_(12, -value), moment_(24, value / 2) {
    steps_per_expert_ = {static_cast<int32_t>(value), 2, 3};
  }

  CheckpointContents Contents(int64_t step) const {
    CheckpointContents contents;
    contents.weights = {
        {"embed.weight", SafetensorsDtype::kF32, {4, 3}, embed_.data(), 48},
        {"lm_head.weight",
         SafetensorsDtype::kF32,
         {4, 3},
         lm_head_.data(),
         48}};
    contents.optimizer_state = {
        {"adam.m", SafetensorsDtype::kF32, {24}, moment_.data(), 96},
        {"adam.steps",
         SafetensorsDtype::kI32,
         {3},
         steps_per_expert_.data(),
         12}};
    contents.weights_metadata = {{"model", "plateau-moe"}};
    contents.state_json =
        absl::StrCat(R"({"step": )", step, R"(, "seed": 1234})");
    return contents;
  }

  const std::vector<float>& embed() const { return embed_; }

 private:
  std::vector<float> embed_;
  std::vector<float> lm_head_;
  std::vector<float> moment_;
  std::vector<int32_t> steps_per_expert_;
};

std::string Write(const std::string& run_dir, int64_t step, float value = 1,
                  int keep_last = 0) {
  const TrainingState state(value);
  absl::StatusOr<std::string> directory = WriteCheckpoint(
      run_dir, step, state.Contents(step), {.keep_last = keep_last});
  EXPECT_TRUE(directory.ok()) << directory.status();
  return directory.ok() ? *directory : "";
}

std::string LatestName(const std::string& run_dir) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
      OpenLatestCheckpoint(run_dir);
  return latest.ok() ? fs::path((*latest)->directory()).filename().string()
                     : latest.status().ToString();
}

TEST(CheckpointTest, RoundTrip) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  const TrainingState state(1.5f);
  absl::StatusOr<std::string> directory =
      WriteCheckpoint(run_dir, 50, state.Contents(50));
  ASSERT_TRUE(directory.ok()) << directory.status();
  EXPECT_EQ(*directory, run_dir + "/checkpoints/step-00000050");
  EXPECT_EQ(ListTestDirectory(*directory),
            (std::vector<std::string>{"MANIFEST.json", "model.safetensors",
                                      "optimizer.safetensors", "state.json"}));

  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(*directory);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->step(), 50);
  EXPECT_EQ((*checkpoint)->directory(), *directory);
  EXPECT_EQ((*checkpoint)->state_json(), state.Contents(50).state_json);
  EXPECT_EQ((*checkpoint)->version(), 1);
  const TensorSource& weights = (*checkpoint)->weights();
  const std::map<std::string, TensorInfo> tensors = weights.Tensors();
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors.at("embed.weight").shape, (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(tensors.count("lm_head.weight"));
  float embed[12];
  ASSERT_TRUE(weights.Read("embed.weight", 0, 12, embed).ok());
  EXPECT_EQ(std::memcmp(embed, state.embed().data(), 48), 0);
  const std::map<std::string, TensorInfo> optimizer_state =
      (*checkpoint)->optimizer_state().Tensors();
  ASSERT_EQ(optimizer_state.size(), 2u);
  EXPECT_EQ(optimizer_state.at("adam.steps").dtype, SafetensorsDtype::kI32);
  EXPECT_TRUE(optimizer_state.count("adam.m"));
  EXPECT_EQ(LatestName(run_dir), "step-00000050");
}

TEST(CheckpointTest, ManifestListsEveryFileWithSizeAndSha256) {
  const std::string directory = Write(MakeTestDirectory("checkpoint"), 7);
  const nlohmann::json manifest =
      nlohmann::json::parse(ReadTestFile(directory + "/MANIFEST.json"));
  EXPECT_EQ(manifest["format"], "plateau-checkpoint");
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(manifest["step"], 7);
  ASSERT_EQ(manifest["files"].size(), 3u);
  for (const nlohmann::json& file : manifest["files"]) {
    const std::string bytes =
        ReadTestFile(directory + "/" + file["name"].get<std::string>());
    EXPECT_EQ(file["bytes"], bytes.size());
    EXPECT_EQ(file["sha256"], Sha256Hex(bytes.data(), bytes.size()));
  }
}

TEST(CheckpointTest, OpenLatestReportsNotFound) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
      OpenLatestCheckpoint(run_dir);
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(latest.status().message().find("does not exist"),
            std::string::npos);

  fs::create_directories(run_dir + "/checkpoints/step-00000003");
  latest = OpenLatestCheckpoint(run_dir);
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(latest.status().message().find(
                "skipped 1 (step-00000003: incomplete checkpoint"),
            std::string::npos)
      << latest.status();
}

TEST(CheckpointTest, OpenLatestSkipsIncompleteCheckpoints) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  Write(run_dir, 10);
  Write(run_dir, 20);
  // A newer step whose file was truncated.
  const std::string truncated = Write(run_dir, 40);
  fs::resize_file(truncated + "/model.safetensors", 100);
  // A newer step directory without a manifest.
  fs::create_directory(run_dir + "/checkpoints/step-00000030");
  WriteTestFile(run_dir + "/checkpoints/step-00000030/model.safetensors", "x");
  // A temporary directory holding a complete checkpoint of a newer step.
  fs::copy(run_dir + "/checkpoints/step-00000020",
           run_dir + "/checkpoints/.step-00000050.tmp-abcdef");
  // Names that are not canonical step directories.
  fs::copy(run_dir + "/checkpoints/step-00000020",
           run_dir + "/checkpoints/step-60");

  EXPECT_EQ(LatestName(run_dir), "step-00000020");
}

TEST(CheckpointTest, FlippedByteFailsChecksumNamingTheFile) {
  const std::string directory = Write(MakeTestDirectory("checkpoint"), 5);
  const std::string path = directory + "/model.safetensors";
  std::string bytes = ReadTestFile(path);
  bytes[bytes.size() - 3] ^= 0x01;  // in the data region
  WriteTestFile(path, bytes);

  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(directory);
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(checkpoint.status().message().find("checksum mismatch in " + path),
            std::string::npos)
      << checkpoint.status();
  // Without verification the (still well-formed) file opens.
  EXPECT_TRUE(Checkpoint::Open(directory, /*verify_checksums=*/false).ok());
}

TEST(CheckpointTest, OpenRejectsIncompleteOrForeignCheckpoints) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  const std::string directory = Write(run_dir, 8);
  const std::string manifest_path = directory + "/MANIFEST.json";
  const std::string manifest = ReadTestFile(manifest_path);

  fs::remove(manifest_path);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(directory);
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      checkpoint.status().message().find("incomplete checkpoint " + directory),
      std::string::npos)
      << checkpoint.status();

  nlohmann::json edited = nlohmann::json::parse(manifest);
  edited["step"] = 9;
  WriteTestFile(manifest_path, edited.dump());
  EXPECT_NE(Checkpoint::Open(directory).status().message().find(
                "is for step 9, not 8"),
            std::string::npos);

  edited = nlohmann::json::parse(manifest);
  edited["version"] = 3;
  WriteTestFile(manifest_path, edited.dump());
  EXPECT_NE(Checkpoint::Open(directory).status().message().find(
                "unsupported \"version\" 3"),
            std::string::npos);

  WriteTestFile(manifest_path, manifest);
  fs::remove(directory + "/state.json");
  checkpoint = Checkpoint::Open(directory);
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(checkpoint.status().message().find(directory + "/state.json"),
            std::string::npos)
      << checkpoint.status();

  EXPECT_EQ(Checkpoint::Open(run_dir + "/nothing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, KeepLastPrunesOldCheckpoints) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  for (int64_t step = 1; step <= 5; ++step) Write(run_dir, step, 1, 3);
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints"),
            (std::vector<std::string>{"step-00000003", "step-00000004",
                                      "step-00000005"}));
  // 0 keeps all.
  Write(run_dir, 6, 1, 0);
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints").size(), 4u);
  // The checkpoint just written stays even when older steps are newer.
  Write(run_dir, 2, 1, 2);
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints"),
            (std::vector<std::string>{"step-00000002", "step-00000006"}));
}

TEST(CheckpointTest, RewritingTheSameStepReplacesIt) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  Write(run_dir, 7, 1.0f);
  const std::string directory = Write(run_dir, 7, 2.0f);
  EXPECT_EQ(ListTestDirectory(run_dir + "/checkpoints"),
            std::vector<std::string>{"step-00000007"});
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(directory);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  float first = 0;
  ASSERT_TRUE((*checkpoint)->weights().Read("embed.weight", 0, 1, &first).ok());
  EXPECT_EQ(first, 2.0f);
}

// Leaves `run_dir` as a crash at some point of writing step 30 (or of
// rewriting step 20) would; `complete` is a complete step-30 checkpoint to
// copy files from.
using CrashStage = std::function<void(const std::string& checkpoints_dir,
                                      const std::string& complete)>;

TEST(CheckpointTest, CrashAtAnyStageLeavesThePreviousCheckpoint) {
  const std::string scratch = MakeTestDirectory("checkpoint");
  const std::string complete = Write(scratch, 30);
  const std::vector<std::pair<const char*, CrashStage>> stages = {
      {"temporary directory created",
       [](const std::string& dir, const std::string&) {
         fs::create_directory(dir + "/.step-00000030.tmp-AAAAAA");
       }},
      {"model written, temporary file of the optimizer half written",
       [](const std::string& dir, const std::string& from) {
         const std::string staged = dir + "/.step-00000030.tmp-AAAAAA";
         fs::create_directory(staged);
         fs::copy(from + "/model.safetensors", staged);
         WriteTestFile(staged + "/.optimizer.safetensors.tmp-BBBBBB", "\x10");
       }},
      {"every file written, manifest half written",
       [](const std::string& dir, const std::string& from) {
         const std::string staged = dir + "/.step-00000030.tmp-AAAAAA";
         fs::copy(from, staged);
         const std::string manifest = ReadTestFile(staged + "/MANIFEST.json");
         WriteTestFile(staged + "/MANIFEST.json",
                       manifest.substr(0, manifest.size() / 2));
       }},
      {"complete, not yet renamed",
       [](const std::string& dir, const std::string& from) {
         fs::copy(from, dir + "/.step-00000030.tmp-AAAAAA");
       }},
      {"renamed without its manifest (a file system that reorders)",
       [](const std::string& dir, const std::string& from) {
         fs::copy(from, dir + "/step-00000030");
         fs::remove(dir + "/step-00000030/MANIFEST.json");
       }},
      {"renamed with a truncated file (a file system that reorders)",
       [](const std::string& dir, const std::string& from) {
         fs::copy(from, dir + "/step-00000030");
         fs::resize_file(dir + "/step-00000030/optimizer.safetensors", 10);
       }},
      {"renamed with a half-written manifest",
       [](const std::string& dir, const std::string& from) {
         fs::copy(from, dir + "/step-00000030");
         fs::resize_file(dir + "/step-00000030/MANIFEST.json", 40);
       }},
      {"rewriting step 20 where exchange is unsupported: old moved aside",
       [](const std::string& dir, const std::string&) {
         fs::rename(dir + "/step-00000020", dir + "/.step-00000020.old-CCCCCC");
       }},
  };
  for (const auto& [label, crash] : stages) {
    SCOPED_TRACE(label);
    const std::string run_dir = MakeTestDirectory("checkpoint");
    Write(run_dir, 10);
    Write(run_dir, 20);
    crash(run_dir + "/checkpoints", complete);
    const std::string expected = absl::StrContains(label, "rewriting step 20")
                                     ? "step-00000010"
                                     : "step-00000020";
    EXPECT_EQ(LatestName(run_dir), expected);

    // The next write commits and removes what the crash left behind.
    Write(run_dir, 40, 1, 0);
    EXPECT_EQ(LatestName(run_dir), "step-00000040");
    for (const std::string& name :
         ListTestDirectory(run_dir + "/checkpoints")) {
      EXPECT_NE(name[0], '.') << name;
    }
  }
}

TEST(CheckpointTest, InvalidInputsCommitNothing) {
  const std::string run_dir = MakeTestDirectory("checkpoint");
  const TrainingState state(1);
  CheckpointContents duplicate = state.Contents(1);
  duplicate.weights.push_back(duplicate.weights[0]);
  CheckpointContents bad_json = state.Contents(1);
  bad_json.state_json = "{\"step\": ";
  const std::vector<std::pair<const char*, absl::StatusOr<std::string>>>
      results = {
          {"negative step", WriteCheckpoint(run_dir, -1, state.Contents(1))},
          {"negative keep_last",
           WriteCheckpoint(run_dir, 1, state.Contents(1), {.keep_last = -1})},
          {"state_json is not valid JSON",
           WriteCheckpoint(run_dir, 1, bad_json)},
          {"duplicate tensor name 'embed.weight'",
           WriteCheckpoint(run_dir, 1, duplicate)},
      };
  for (const auto& [message, result] : results) {
    SCOPED_TRACE(message);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(message), std::string::npos)
        << result.status();
    EXPECT_NE(result.status().message().find("cannot write checkpoint"),
              std::string::npos)
        << result.status();
  }
  std::error_code error;
  if (fs::exists(run_dir + "/checkpoints", error)) {
    EXPECT_TRUE(ListTestDirectory(run_dir + "/checkpoints").empty());
  }
  EXPECT_EQ(OpenLatestCheckpoint(run_dir).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, DirectoryNames) {
  EXPECT_EQ(CheckpointDirectoryName(0), "step-00000000");
  EXPECT_EQ(CheckpointDirectoryName(50), "step-00000050");
  EXPECT_EQ(CheckpointDirectoryName(123456789), "step-123456789");
  EXPECT_EQ(CheckpointDirectory("runs/a/", 50),
            "runs/a/checkpoints/step-00000050");
}

}  // namespace
}  // namespace plateau::engine
