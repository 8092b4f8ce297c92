#include "engine/train/trainer.h"

#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job_spec.h"

namespace plateau::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAutoSpec[] = R"(
name: auto-trainer
model: {layers: 1, d_model: 16, heads: 2, experts: 2, top_k: 1,
        ffn_hidden: 16, vocab: 64, seq_len: 8}
schedules: {auto: true, ring_dtp: true}
data: {path: no-such-data, batch_tokens: 16}
train: {steps: 1}
)";

absl::Status CreateStatus(const v1::JobSpec& spec) {
  std::ostringstream log;
  TrainerOptions options;
  options.run_directory = ::testing::TempDir();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(spec, options, &log);
  return trainer.status();
}

TEST(TrainerTest, RefusesAnAutoSpecWhoseSchedulesAreNotChosen) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kAutoSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const absl::Status status = CreateStatus(*spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("schedules: auto: the schedules have not been chosen "
                        "yet"));
}

TEST(TrainerTest, RunsAnAutoSpecOnceItsSchedulesAreChosen) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kAutoSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::ScheduleSpec& schedules = *spec->mutable_schedules();
  schedules.set_dispatch_chunk_tokens(0);
  schedules.set_sco(false);
  schedules.set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_NONE);
  // Past the check, set-up fails on the missing data instead.
  const absl::Status status = CreateStatus(*spec);
  EXPECT_THAT(status.message(), Not(HasSubstr("schedules")));
  EXPECT_THAT(status.message(), HasSubstr("no-such-data"));
}

}  // namespace
}  // namespace plateau::engine
