#include "client/args.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, output, "table", "test flag");
ABSL_FLAG(bool, follow, false, "test flag");
ABSL_FLAG(std::string, coordinator, "", "test flag");
ABSL_FLAG(std::string, not_accepted, "", "registered, but not accepted");

namespace plateau::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ArgsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_output, "table");
    absl::SetFlag(&FLAGS_follow, false);
    absl::SetFlag(&FLAGS_coordinator, "");
  }

  absl::StatusOr<ParsedArgs> Parse(const std::vector<std::string>& args) {
    return ParseArgs(args, {"output", "follow", "coordinator"},
                     {{"o", "output"}, {"f", "follow"}});
  }
};

TEST_F(ArgsTest, FlagsBeforeAndAfterTheVerb) {
  absl::StatusOr<ParsedArgs> parsed =
      Parse({"--coordinator", "h:1", "logs", "j-1", "-f"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->positional, ElementsAre("logs", "j-1"));
  EXPECT_THAT(parsed->flags_given, ElementsAre("coordinator", "follow"));
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "h:1");
  EXPECT_TRUE(absl::GetFlag(FLAGS_follow));
  EXPECT_FALSE(parsed->help);
}

TEST_F(ArgsTest, ShortAndLongSpellings) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ls", "-o", "json"},
                                             {"ls", "-o=json"},
                                             {"ls", "--o", "json"},
                                             {"ls", "--output=json"},
                                             {"-output", "json", "ls"}}) {
    absl::SetFlag(&FLAGS_output, "table");
    absl::StatusOr<ParsedArgs> parsed = Parse(args);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(parsed->positional, ElementsAre("ls"));
    EXPECT_EQ(absl::GetFlag(FLAGS_output), "json") << args[1];
  }
}

TEST_F(ArgsTest, BooleanForms) {
  ASSERT_TRUE(Parse({"--follow=true"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_follow));
  ASSERT_TRUE(Parse({"--nofollow"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_follow));
  ASSERT_TRUE(Parse({"--follow"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_follow));
  EXPECT_FALSE(Parse({"--follow=maybe"}).ok());
}

TEST_F(ArgsTest, DoubleDashEndsFlags) {
  absl::StatusOr<ParsedArgs> parsed = Parse({"describe", "--", "-weird"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->positional, ElementsAre("describe", "-weird"));
}

TEST_F(ArgsTest, Help) {
  EXPECT_TRUE(Parse({"-h"})->help);
  EXPECT_TRUE(Parse({"ls", "--help"})->help);
}

TEST_F(ArgsTest, UsageErrors) {
  EXPECT_THAT(Parse({"--bogus"}).status().message(),
              HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(Parse({"--bogus=1"}).status().message(),
              HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(Parse({"--not_accepted=x"}).status().message(),
              HasSubstr("unknown flag --not_accepted"));
  EXPECT_THAT(Parse({"--nocoordinator"}).status().message(),
              HasSubstr("unknown flag --nocoordinator"));
  EXPECT_THAT(Parse({"ls", "-o"}).status().message(),
              HasSubstr("flag --output needs a value"));
  EXPECT_EQ(Parse({"--bogus"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::client
