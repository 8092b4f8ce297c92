// Checkpoints under storage faults: every step of a write (and of the
// pruning and replacing it does) failed with a full disk, EIO, a short
// write or a crash, one at a time. Whatever the fault, the newest intact
// checkpoint is the new one or the one before, whole; no complete-looking
// checkpoint fails to verify; the run directory takes the next write. A
// damaged checkpoint on disk (torn, truncated, flipped) is passed over for
// an older intact one, and one that cannot be read stops the search.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fault_injecting_file_system.h"
#include "common/file_util.h"
#include "common/test_files.h"
#include "engine/checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using plateau::testing::ListTestDirectory;
using plateau::testing::MakeTestDirectory;
using plateau::testing::ReadTestFile;
using plateau::testing::WriteTestFile;

constexpr StorageFault kFaults[] = {
    StorageFault::kNoSpace, StorageFault::kIoError, StorageFault::kShortWrite,
    StorageFault::kCrash};
constexpr int kWeights = 4096;

// A checkpoint whose every value is `value`, so that the step a run
// resumes from can be told by its contents.
class Contents {
 public:
  Contents(int64_t step, float value)
      : weights_(kWeights, value), moments_(kWeights, -value) {
    contents_.weights = {{"w",
                          SafetensorsDtype::kF32,
                          {kWeights},
                          weights_.data(),
                          kWeights * sizeof(float)}};
    contents_.optimizer_state = {{"m",
                                  SafetensorsDtype::kF32,
                                  {kWeights},
                                  moments_.data(),
                                  kWeights * sizeof(float)}};
    contents_.state_json = absl::StrCat(R"({"step": )", step, "}");
  }
  const CheckpointContents& get() const { return contents_; }

 private:
  std::vector<float> weights_;
  std::vector<float> moments_;
  CheckpointContents contents_;
};

void WriteStep(const std::string& run_dir, int64_t step, float value,
               FileSystem& file_system = PosixFileSystem()) {
  const Contents contents(step, value);
  const absl::StatusOr<std::string> written =
      WriteCheckpoint(run_dir, step, contents.get(),
                      {.keep_last = 2, .file_system = &file_system});
  ASSERT_TRUE(written.ok()) << written.status();
}

// The value of the checkpoint in `directory`, which must verify.
float ValueOf(const std::string& directory) {
  const absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(directory);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return 0;
  float last = 0;
  EXPECT_TRUE((*checkpoint)->weights().Read("w", kWeights - 1, 1, &last).ok());
  return last;
}

// Every step directory is intact, or incomplete (no manifest): none that
// looks complete fails to verify.
void ExpectNoDamagedCompleteCheckpoint(const std::string& run_dir) {
  const std::string checkpoints = run_dir + "/checkpoints";
  for (const std::string& name : ListTestDirectory(checkpoints)) {
    if (!absl::StartsWith(name, "step-")) continue;
    const absl::Status status =
        Checkpoint::Open(checkpoints + "/" + name).status();
    EXPECT_TRUE(status.ok() || absl::IsFailedPrecondition(status))
        << name << ": " << status;
  }
}

struct Scenario {
  const char* name;
  int64_t step;    // written under the fault
  float value;     // its contents
  int64_t before;  // the newest step before it
  float before_value;
};

// Before each try: steps 1 (value 1) and 2 (value 2). Step 3 prunes step 1;
// rewriting step 2 replaces a non-empty directory.
constexpr Scenario kScenarios[] = {
    {"a new step that prunes the oldest", 3, 3, 2, 2},
    {"a step written again", 2, 22, 2, 2},
};

class CheckpointFaultTest : public ::testing::Test {
 protected:
  void Prepare(const std::string& run_dir) {
    WriteStep(run_dir, 1, 1);
    WriteStep(run_dir, 2, 2);
  }
};

TEST_F(CheckpointFaultTest, EveryStepOfAWriteUnderEveryFault) {
  int64_t tries = 0;
  for (const Scenario& scenario : kScenarios) {
    SCOPED_TRACE(scenario.name);
    const std::string counted = MakeTestDirectory("counted");
    Prepare(counted);
    FaultInjectingFileSystem counting;
    WriteStep(counted, scenario.step, scenario.value, counting);
    const int64_t steps = counting.steps();
    // Staging, three files, manifest, commit, prune: dozens of steps.
    ASSERT_GE(steps, 20) << absl::StrJoin(counting.log(), "\n");
    std::cout << scenario.name << ": " << steps
              << " file-system steps, each failed under 4 faults\n";
    for (const StorageFault fault : kFaults) {
      for (int64_t step = 1; step <= steps; ++step) {
        const std::string run_dir = MakeTestDirectory("faulted");
        Prepare(run_dir);
        FaultInjectingFileSystem faulty;
        faulty.InjectAt(step, fault);
        const Contents contents(scenario.step, scenario.value);
        const absl::StatusOr<std::string> written =
            WriteCheckpoint(run_dir, scenario.step, contents.get(),
                            {.keep_last = 2, .file_system = &faulty});
        const std::string trace = absl::StrCat(
            StorageFaultName(fault), " at ", counting.log()[step - 1], ": ",
            written.ok() ? "OK" : written.status().ToString());
        SCOPED_TRACE(trace);
        ++tries;
        if (!written.ok() && fault != StorageFault::kCrash) {
          // The error says what failed, with the run directory.
          EXPECT_TRUE(absl::StrContains(written.status().message(), run_dir));
          EXPECT_TRUE(
              absl::StrContains(written.status().message(), "injected"));
        }
        ExpectNoDamagedCompleteCheckpoint(run_dir);
        const absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
            OpenLatestCheckpoint(run_dir);
        ASSERT_TRUE(latest.ok()) << latest.status();
        const std::string& latest_dir = (*latest)->directory();
        const float value = ValueOf(latest_dir);
        if (written.ok()) {
          EXPECT_EQ(latest_dir, CheckpointDirectory(run_dir, scenario.step));
          EXPECT_EQ(value, scenario.value);
        } else {
          EXPECT_TRUE(value == scenario.value || value == scenario.before_value)
              << value;
          EXPECT_GE(latest_dir, CheckpointDirectory(run_dir, scenario.before));
        }
        // The next write (the disk back, or after the restart) succeeds and
        // is the newest.
        WriteStep(run_dir, scenario.step, scenario.value);
        EXPECT_EQ(ValueOf(CheckpointDirectory(run_dir, scenario.step)),
                  scenario.value);
        if (HasFailure()) return;  // one try's story is enough
      }
    }
  }
  EXPECT_GE(tries, 150);
}

// Damage on disk after the commit: a torn (truncated) file, flipped bytes,
// a lost file. The newest checkpoint does not verify, so the search passes
// over it to the older one and says why.
TEST_F(CheckpointFaultTest, ADamagedNewestCheckpointIsPassedOver) {
  const std::string model = std::string("/") + kModelFileName;
  const std::vector<std::pair<const char*, std::function<void(std::string)>>>
      damages = {
          {"truncated",
           [&](const std::string& directory) {
             ASSERT_EQ(::truncate((directory + model).c_str(), 100), 0);
           }},
          {"a flipped byte",
           [&](const std::string& directory) {
             std::string text = ReadTestFile(directory + model);
             text[text.size() - 7] ^= 0x40;
             WriteTestFile(directory + model, text);
           }},
          {"a lost file",
           [&](const std::string& directory) {
             ASSERT_EQ(::unlink((directory + model).c_str()), 0);
           }},
      };
  for (const auto& [name, damage] : damages) {
    SCOPED_TRACE(name);
    const std::string run_dir = MakeTestDirectory("damaged");
    Prepare(run_dir);
    damage(CheckpointDirectory(run_dir, 2));
    std::vector<std::string> skipped;
    const absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
        OpenLatestCheckpoint(run_dir, &skipped);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ((*latest)->directory(), CheckpointDirectory(run_dir, 1));
    EXPECT_EQ(ValueOf((*latest)->directory()), 1);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_TRUE(absl::StartsWith(skipped[0], "step-00000002: ")) << skipped[0];
  }
}

// Every truncation of a checkpoint's weights file is refused with
// DATA_LOSS, by the checkpoint's open and by the safetensors reader on its
// own, and none crashes the reader.
TEST_F(CheckpointFaultTest, EveryTruncationOfAFileIsDataLoss) {
  const std::string run_dir = MakeTestDirectory("truncated");
  WriteStep(run_dir, 1, 1);
  const std::string directory = CheckpointDirectory(run_dir, 1);
  const std::string path = directory + "/" + kModelFileName;
  const std::string whole = ReadTestFile(path);
  for (size_t bytes = 0; bytes < whole.size(); bytes += 97) {
    WriteTestFile(path, whole.substr(0, bytes));
    const absl::Status status = Checkpoint::Open(directory).status();
    ASSERT_TRUE(absl::IsDataLoss(status)) << bytes << ": " << status;
    const absl::Status unverified =
        Checkpoint::Open(directory, /*verify_checksums=*/false).status();
    ASSERT_TRUE(absl::IsDataLoss(unverified)) << bytes << ": " << unverified;
    // The reader alone, without a manifest to compare sizes with.
    const absl::Status read = SafetensorsReader::Open(path).status();
    ASSERT_TRUE(absl::IsDataLoss(read)) << bytes << ": " << read;
  }
}

// A checkpoint that cannot be read now (EIO) may be whole: the search stops
// with the error rather than fall back to an older step and lose progress.
TEST_F(CheckpointFaultTest, AnUnreadableCheckpointStopsTheSearch) {
  const std::string run_dir = MakeTestDirectory("unreadable");
  Prepare(run_dir);
  FaultInjectingFileSystem unreadable;
  unreadable.FailReads(true);
  const absl::StatusOr<std::unique_ptr<Checkpoint>> latest =
      OpenLatestCheckpoint(run_dir, nullptr, unreadable);
  EXPECT_FALSE(latest.ok());
  EXPECT_FALSE(absl::IsNotFound(latest.status())) << latest.status();
  EXPECT_FALSE(absl::IsDataLoss(latest.status())) << latest.status();
  EXPECT_TRUE(absl::StrContains(latest.status().message(), "injected EIO"))
      << latest.status();
}

}  // namespace
}  // namespace plateau::engine
