#include "client/config.h"

#include <sys/stat.h>

#include <string>

#include "absl/status/status.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::client {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = plateau::testing::MakeTestDirectory("config");
    path_ = directory_ + "/plateau/config.yaml";
  }

  // Private to its owner, as a file that holds a token must be.
  void WriteConfig(const std::string& text) {
    plateau::testing::WriteTestFile(path_, text);
    ASSERT_EQ(chmod(path_.c_str(), 0600), 0);
  }

  std::string directory_;
  std::string path_;
};

TEST_F(ConfigTest, DefaultsWithoutAnySource) {
  ConfigSources sources;
  sources.file_path = path_;  // does not exist: fine
  absl::StatusOr<ClientConfig> config = ResolveConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(config->token, "");
  EXPECT_EQ(config->ca_cert_file, "");
}

TEST_F(ConfigTest, FlagsBeatEnvironmentBeatsFileBeatsDefault) {
  WriteConfig(
      "coordinator: file-host:1\ntoken: file-token\nca_cert: /etc/ca.pem\n");
  ConfigSources sources;
  sources.file_path = path_;
  absl::StatusOr<ClientConfig> config = ResolveConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "file-host:1");
  EXPECT_EQ(config->token, "file-token");
  EXPECT_EQ(config->ca_cert_file, "/etc/ca.pem");

  sources.environment.coordinator = "env-host:2";
  sources.environment.token = "env-token";
  config = ResolveConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "env-host:2");
  EXPECT_EQ(config->token, "env-token");
  EXPECT_EQ(config->ca_cert_file, "/etc/ca.pem");

  sources.flags.coordinator = "flag-host:3";
  config = ResolveConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "flag-host:3");
  EXPECT_EQ(config->token, "env-token");  // settings resolve one by one

  sources.flags.token = "flag-token";
  sources.flags.ca_cert_file = "/flag/ca.pem";
  config = ResolveConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->token, "flag-token");
  EXPECT_EQ(config->ca_cert_file, "/flag/ca.pem");
}

TEST_F(ConfigTest, UnknownKeyIsAnErrorNamingKeyAndFile) {
  WriteConfig("coordinator: h:1\ntokn: x\n");
  absl::StatusOr<ClientConfig> config = ReadConfigFile(path_);
  ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              AllOf(HasSubstr(path_), HasSubstr("unknown key 'tokn'")));
}

TEST_F(ConfigTest, MalformedYamlIsAnErrorNamingTheFile) {
  WriteConfig("coordinator: [h:1\n");
  absl::StatusOr<ClientConfig> config = ReadConfigFile(path_);
  ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(path_));

  ConfigSources sources;
  sources.file_path = path_;
  sources.flags.coordinator = "h:1";  // a broken file is an error anyway
  EXPECT_FALSE(ResolveConfig(sources).ok());
}

TEST_F(ConfigTest, NonMappingAndNonScalarValuesAreErrors) {
  WriteConfig("- coordinator\n");
  EXPECT_THAT(ReadConfigFile(path_).status().message(),
              AllOf(HasSubstr(path_), HasSubstr("expected a mapping")));
  WriteConfig("token: {a: b}\n");
  EXPECT_THAT(ReadConfigFile(path_).status().message(),
              AllOf(HasSubstr(path_), HasSubstr("token: expected a string")));
}

TEST_F(ConfigTest, EmptyFileIsFine) {
  WriteConfig("");
  absl::StatusOr<ClientConfig> config = ReadConfigFile(path_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "");
}

TEST_F(ConfigTest, RelativeCaCertIsBesideTheFile) {
  WriteConfig("ca_cert: ca.pem\n");
  absl::StatusOr<ClientConfig> config = ReadConfigFile(path_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_cert_file, directory_ + "/plateau/ca.pem");
}

TEST(ConfigPathTest, XdgConfigHomeThenHome) {
  EXPECT_EQ(ConfigFilePath("/x", "/home/ada"), "/x/plateau/config.yaml");
  EXPECT_EQ(ConfigFilePath("", "/home/ada"),
            "/home/ada/.config/plateau/config.yaml");
  EXPECT_EQ(ConfigFilePath("", ""), "");
}

TEST_F(ConfigTest, AFileWithATokenThatOthersMayReadIsRefused) {
  WriteConfig("token: secret\n");
  ASSERT_EQ(chmod(path_.c_str(), 0640), 0);
  absl::StatusOr<ClientConfig> config = ReadConfigFile(path_);
  EXPECT_TRUE(absl::IsInvalidArgument(config.status()));
  EXPECT_THAT(
      config.status().message(),
      AllOf(HasSubstr(path_), HasSubstr("mode 0640"), HasSubstr("chmod 600")));
  // Without a token the file is no secret.
  WriteConfig("coordinator: host:1\n");
  ASSERT_EQ(chmod(path_.c_str(), 0644), 0);
  EXPECT_TRUE(ReadConfigFile(path_).ok());
}

TEST_F(ConfigTest, AllowPlaintextTokenIsABoolean) {
  WriteConfig("allow_plaintext_token: true\n");
  absl::StatusOr<ClientConfig> config = ReadConfigFile(path_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->allow_plaintext_token);
  WriteConfig("allow_plaintext_token: sometimes\n");
  config = ReadConfigFile(path_);
  EXPECT_THAT(config.status().message(),
              HasSubstr("allow_plaintext_token: expected true or false"));
}

TEST_F(ConfigTest, ATokenFileIsReadWithoutItsNewline) {
  const std::string token_path = directory_ + "/token";
  plateau::testing::WriteTestFile(token_path, "  secret\n");
  absl::StatusOr<std::string> token = ReadTokenFile(token_path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "secret");
  plateau::testing::WriteTestFile(token_path, "\n");
  EXPECT_THAT(ReadTokenFile(token_path).status().message(),
              AllOf(HasSubstr("--token_file"), HasSubstr("is empty")));
  EXPECT_THAT(ReadTokenFile(directory_ + "/missing").status().message(),
              AllOf(HasSubstr("--token_file"), HasSubstr("missing")));
}

// The checks resolve nothing but literals and localhost: nothing is sent.
TEST(CheckTokenTransportTest, APlaintextTokenOnlyToLoopbackUnlessAllowed) {
  ClientConfig config;
  config.coordinator = "192.0.2.1:7070";
  EXPECT_TRUE(CheckTokenTransport(config).ok());  // no token, no secret
  config.token = "secret";
  const absl::Status refused = CheckTokenTransport(config);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused));
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("192.0.2.1:7070"), HasSubstr("--ca_cert"),
                    HasSubstr("--allow_plaintext_token")));
  config.allow_plaintext_token = true;
  EXPECT_TRUE(CheckTokenTransport(config).ok());
  config.allow_plaintext_token = false;
  config.ca_cert_file = "/etc/ca.pem";
  EXPECT_TRUE(CheckTokenTransport(config).ok());
  config.ca_cert_file = "";
  for (const char* loopback : {"127.0.0.1:7070", "localhost:7070"}) {
    config.coordinator = loopback;
    EXPECT_TRUE(CheckTokenTransport(config).ok()) << loopback;
  }
}

}  // namespace
}  // namespace plateau::client
