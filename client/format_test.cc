#include "client/format.h"

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"

namespace plateau::client {
namespace {

using ::testing::HasSubstr;

TEST(FormatTest, EnumNamesDropTheirPrefix) {
  EXPECT_EQ(StateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(EventKindName(v1::JOB_EVENT_KIND_CHECKPOINTED), "CHECKPOINTED");
  EXPECT_EQ(NodeStateName(v1::NODE_STATE_DRAINING), "DRAINING");
  EXPECT_EQ(PoolName(v1::MEMORY_POOL_DEVICE), "device");
  EXPECT_EQ(ComponentName(v1::MEMORY_COMPONENT_VOCAB_PROJECTION),
            "vocab_projection");
  EXPECT_EQ(DeviceKindName(v1::DEVICE_KIND_CUDA), "cuda");
  EXPECT_EQ(StateName(static_cast<v1::JobState>(99)), "99");
}

TEST(FormatTest, FinalStates) {
  EXPECT_TRUE(IsFinalState(v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsFinalState(v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsFinalState(v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsFinalState(v1::JOB_STATE_CANCELLING));
  EXPECT_FALSE(IsFinalState(v1::JOB_STATE_RUNNING));
}

TEST(FormatTest, TimesAreUtc) {
  google::protobuf::Timestamp time;
  EXPECT_EQ(FormatTime(time), "-");
  // 2026-11-29 17:03:12 UTC.
  time.set_seconds(1795971792);
  time.set_nanos(500000000);
  EXPECT_EQ(FormatTime(time), "2026-11-29 17:03:12Z");
}

TEST(FormatTest, AgesUseTheLargestWholeUnit) {
  EXPECT_EQ(FormatAge(absl::Seconds(0)), "0s");
  EXPECT_EQ(FormatAge(absl::Seconds(12)), "12s");
  EXPECT_EQ(FormatAge(absl::Seconds(59)), "59s");
  EXPECT_EQ(FormatAge(absl::Seconds(60)), "1m");
  EXPECT_EQ(FormatAge(absl::Minutes(5) + absl::Seconds(59)), "5m");
  EXPECT_EQ(FormatAge(absl::Hours(3) + absl::Minutes(59)), "3h");
  EXPECT_EQ(FormatAge(absl::Hours(24)), "1d");
  EXPECT_EQ(FormatAge(absl::Hours(50)), "2d");
  EXPECT_EQ(FormatAge(absl::Seconds(-30)), "0s");
}

TEST(FormatTest, AgeSinceAnUnsetTimeIsADash) {
  google::protobuf::Timestamp time;
  EXPECT_EQ(AgeSince(time, absl::Now()), "-");
  time.set_seconds(1000);
  EXPECT_EQ(AgeSince(time, absl::FromUnixSeconds(1000 + 7200)), "2h");
}

TEST(FormatTest, ProgressBarHasItsWidth) {
  EXPECT_EQ(ProgressBar(0, 300, 10), "[..........]");
  EXPECT_EQ(ProgressBar(120, 300, 10), "[####......]");
  EXPECT_EQ(ProgressBar(300, 300, 10), "[##########]");
  EXPECT_EQ(ProgressBar(400, 300, 10), "[##########]");
  EXPECT_EQ(ProgressBar(-5, 300, 10), "[..........]");
  EXPECT_EQ(ProgressBar(5, 0, 4), "[....]");
  for (int step = 0; step <= 300; step += 7) {
    EXPECT_EQ(ProgressBar(step, 300, 20).size(), 22u);
  }
}

TEST(FormatTest, TableAlignsColumns) {
  const std::string table =
      FormatTable({"ID", "NAME", "AGE"},
                  {{"j-00000001", "a", "5m"}, {"j-2", "longer-name", ""}});
  EXPECT_EQ(table,
            "ID          NAME         AGE\n"
            "j-00000001  a            5m\n"
            "j-2         longer-name\n");
}

TEST(FormatTest, TablePadsShortRowsAndHandlesNoRows) {
  EXPECT_EQ(FormatTable({"A", "B"}, {}), "A  B\n");
  EXPECT_EQ(FormatTable({"A", "B"}, {{"xyz"}}), "A    B\nxyz\n");
}

TEST(FormatTest, JsonKeepsProtoNamesAndDefaults) {
  v1::ListJobsResponse response;
  v1::Job* job = response.add_jobs();
  job->set_id("j-00000001");
  job->set_state(v1::JOB_STATE_QUEUED);
  absl::StatusOr<std::string> json = ToJson(response);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr("\"id\": \"j-00000001\""));
  EXPECT_THAT(*json, HasSubstr("\"state\": \"JOB_STATE_QUEUED\""));
  EXPECT_THAT(*json, HasSubstr("\"spec_yaml\": \"\""));  // a default value
  EXPECT_THAT(*json, HasSubstr("\"next_page_token\": \"\""));
  EXPECT_TRUE(absl::EndsWith(*json, "}\n"));
}

TEST(FormatTest, TerminalSafeEscapesEveryControlButNewlineAndTab) {
  // A title change, a cursor move, a carriage return over the line, a bell,
  // a backspace, DEL, and CSI as a UTF-8 C1 control and as a raw byte.
  EXPECT_EQ(TerminalSafe("a\x1b]0;pwned\x07"
                         "b\x1b[2Ac\rd\x08"
                         "e\x7f"),
            "a\\x1b]0;pwned\\x07b\\x1b[2Ac\\x0dd\\x08e\\x7f");
  EXPECT_EQ(TerminalSafe("x\xc2\x9by \x9bz"), "x\\xc2\\x9by \\x9bz");
  // Lines, tabs and UTF-8 text (é, 日本, and U+00A0, whose lead byte is
  // C2 too) are kept.
  const std::string kept =
      "line 1\n\tline 2: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xc2\xa0";
  EXPECT_EQ(TerminalSafe(kept), kept);
  EXPECT_EQ(TerminalSafe(""), "");
}

}  // namespace
}  // namespace plateau::client
