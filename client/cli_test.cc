// Runs the built `plateau` binary without a daemon: usage errors (status 2),
// local spec validation and an unreachable plateaud (status 1).
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::client {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = plateau::testing::MakeTestDirectory("cli");
    binary_ = absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                           std::getenv("TEST_WORKSPACE"), "/client/plateau");
    example_ = absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                            std::getenv("TEST_WORKSPACE"),
                            "/deploy/examples/tiny-moe.yaml");
  }

  // Runs the binary with `args` (shell words) in a clean environment whose
  // config directory is the test's own.
  Result Run(const std::string& args, const std::string& environment = "") {
    const std::string out = directory_ + "/stdout";
    const std::string err = directory_ + "/stderr";
    const std::string command = absl::StrCat(
        "env -i HOME=", directory_, " XDG_CONFIG_HOME=", directory_, " ",
        environment, " ", binary_, " ", args, " >", out, " 2>", err);
    Result result;
    const int status = std::system(command.c_str());
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = plateau::testing::ReadTestFile(out);
    result.err = plateau::testing::ReadTestFile(err);
    return result;
  }

  std::string directory_;
  std::string binary_;
  std::string example_;
};

TEST_F(CliTest, HelpDocumentsTheExitStatuses) {
  const Result result = Run("--help");
  EXPECT_EQ(result.status, 0);
  EXPECT_THAT(result.out,
              AllOf(HasSubstr("submit SPEC [--watch]"),
                    HasSubstr("3  the followed job FAILED"),
                    HasSubstr("plan SPEC [-o table|json]"),
                    HasSubstr("4  the followed job was CANCELLED")));
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  for (const char* args :
       {"", "frobnicate", "describe", "ls extra", "ls --watch", "ls -o yaml",
        "--bogus ls", "ls -o", "plan", "ls --device_memory 1GiB",
        "plan x.yaml --device_memory lots", "plan x.yaml --devices -1",
        "plan x.yaml --routing_skew 0.5", "plan x.yaml --margin 1",
        "nodes drain", "nodes drain a b", "nodes cordon a",
        "nodes resume a --reason x", "ls --reason x"}) {
    const Result result = Run(args);
    EXPECT_EQ(result.status, 2) << args;
    EXPECT_THAT(result.err, HasSubstr("plateau: ")) << args;
    EXPECT_THAT(result.err, HasSubstr("plateau --help")) << args;
  }
}

TEST_F(CliTest, UnreachableDaemonIsNamed) {
  for (const char* args : {"--coordinator 127.0.0.1:1 ls",
                           "nodes -o json --coordinator=127.0.0.1:1",
                           "describe j-1 --coordinator 127.0.0.1:1",
                           "nodes drain node-a --reason disk "
                           "--coordinator 127.0.0.1:1"}) {
    const Result result = Run(args);
    EXPECT_EQ(result.status, 1) << args;
    EXPECT_THAT(result.err,
                HasSubstr("plateau: cannot reach plateaud at 127.0.0.1:1"))
        << args;
    EXPECT_EQ(result.out, "") << args;
  }
}

TEST_F(CliTest, EnvironmentAndConfigFileChooseTheAddress) {
  Result result = Run("ls", "PLATEAU_COORDINATOR=127.0.0.1:2");
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err, HasSubstr("cannot reach plateaud at 127.0.0.1:2"));

  plateau::testing::WriteTestFile(directory_ + "/plateau/config.yaml",
                                  "coordinator: 127.0.0.1:3\n");
  result = Run("ls");
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err, HasSubstr("cannot reach plateaud at 127.0.0.1:3"));
  result = Run("ls", "PLATEAU_COORDINATOR=127.0.0.1:2");
  EXPECT_THAT(result.err, HasSubstr("cannot reach plateaud at 127.0.0.1:2"));
}

TEST_F(CliTest, BadConfigFileIsAnError) {
  const std::string path = directory_ + "/plateau/config.yaml";
  plateau::testing::WriteTestFile(path, "coordinater: 127.0.0.1:3\n");
  const Result result = Run("ls");
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err, AllOf(HasSubstr("plateau: " + path),
                                HasSubstr("unknown key 'coordinater'")));
}

TEST_F(CliTest, InvalidSpecIsReportedPerFieldWithoutADaemon) {
  const std::string spec = directory_ + "/job.yaml";
  std::string yaml = plateau::testing::ReadTestFile(example_);
  ASSERT_THAT(yaml, HasSubstr("heads: 8"));
  plateau::testing::WriteTestFile(
      spec,
      absl::StrReplaceAll(yaml, {{"heads: 8", "heads: 7"},
                                 {"name: tiny-moe", "name: x\nbogus: 1"}}));
  const Result result =
      Run(absl::StrCat("submit ", spec, " --coordinator 127.0.0.1:1"));
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err,
              AllOf(HasSubstr(spec + ": model.heads: 7 does not divide d_model "
                                     "256\n"),
                    HasSubstr(spec + ": bogus: ")));
  EXPECT_THAT(result.err, Not(HasSubstr("cannot reach")));
  EXPECT_EQ(result.out, "");
}

TEST_F(CliTest, ValidSpecGoesToTheDaemon) {
  const Result result = Run(
      absl::StrCat("submit ", example_, " --watch --coordinator 127.0.0.1:1"));
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err, HasSubstr("cannot reach plateaud at 127.0.0.1:1"));
}

TEST_F(CliTest, MissingSpecFileIsAnError) {
  const Result result = Run(absl::StrCat("submit ", directory_, "/none.yaml"));
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("plateau: "), HasSubstr("none.yaml")));
}

TEST_F(CliTest, PlanPrintsTheTableAndExitsZeroWhenTheJobFits) {
  const Result result =
      Run(absl::StrCat("plan ", example_, " --device_memory 2GiB"));
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_THAT(
      result.out,
      AllOf(HasSubstr("plan for tiny-moe: 2 devices of 2.00 GiB, "
                      "margin 5%, worst-case routing (every token on the "
                      "same experts)\n"),
            HasSubstr("schedules: dispatch_chunk_tokens 1024, "
                      "ring_dtp, sco, optimizer_offload stream\n"),
            HasSubstr("COMPONENT "), HasSubstr("\nvocab_projection "),
            HasSubstr("\ndevice peak "), HasSubstr("\nhost peak "),
            HasSubstr("binds first (baseline): "),
            HasSubstr("binds first (planned): "),
            HasSubstr("fits: yes, planned peak "), HasSubstr("max seq_len: "),
            HasSubstr("max batch_tokens: ")));
  EXPECT_EQ(result.err, "");
}

TEST_F(CliTest, PlanExitsOneWhenTheJobDoesNotFit) {
  const Result result =
      Run(absl::StrCat("plan ", example_, " --device_memory 32MiB"));
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.out,
              AllOf(HasSubstr("fits: no, planned peak "), HasSubstr("To fit:"),
                    HasSubstr("max seq_len: ")));
}

TEST_F(CliTest, PlanJsonHoldsThePlanAndTheSchedules) {
  const Result result = Run(absl::StrCat(
      "plan ", example_, " --device_memory=2GiB --devices 4 -o json"));
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_THAT(
      result.out,
      AllOf(HasSubstr("{\n \"plan\": {\n"), HasSubstr("\"devices\": 4,"),
            HasSubstr("\"fits\": true"), HasSubstr("\n \"schedules\": {\n"),
            HasSubstr("\"ring_dtp\": true")));
}

TEST_F(CliTest, PlanWithoutDeviceMemoryNeedsPlateaud) {
  const Result result =
      Run(absl::StrCat("plan ", example_, " --coordinator 127.0.0.1:1"));
  EXPECT_EQ(result.status, 2);
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("plateau: no device memory to plan for: cannot "
                              "reach plateaud at 127.0.0.1:1"),
                    HasSubstr("--device_memory")));
  EXPECT_EQ(result.out, "");
}

TEST_F(CliTest, PlanReportsAnInvalidSpecPerField) {
  const std::string spec = directory_ + "/job.yaml";
  plateau::testing::WriteTestFile(
      spec, absl::StrReplaceAll(plateau::testing::ReadTestFile(example_),
                                {{"heads: 8", "heads: 7"}}));
  const Result result =
      Run(absl::StrCat("plan ", spec, " --device_memory 2GiB"));
  EXPECT_EQ(result.status, 1);
  EXPECT_THAT(result.err,
              HasSubstr(spec + ": model.heads: 7 does not divide d_model 256"));
  EXPECT_EQ(result.out, "");
}

}  // namespace
}  // namespace plateau::client
