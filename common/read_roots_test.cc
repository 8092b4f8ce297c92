#include "common/read_roots.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/test_files.h"
#include "gtest/gtest.h"

namespace plateau {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kRoots = {"data", "models", "/datasets"};

TEST(ReadRootsTest, PathsUnderTheRootsPassTheLexicalCheck) {
  for (const char* path :
       {"data/brown", "data/brown/", "./data/brown", "models/qwen", "data",
        "/datasets/web", "/datasets/web/./books", "data//b"}) {
    EXPECT_TRUE(CheckPathUnderReadRoots("data.path", path, kRoots).ok())
        << path;
  }
}

TEST(ReadRootsTest, PathsOutsideTheRootsAreRefusedNamingFieldAndRoots) {
  for (const char* path :
       {"/etc/shadow", "../../../../root", "data/../../etc", "data/../runs/j-1",
        "runs/j-1", "/datasets/../etc", "/datasetsx/a", "/", "", ".",
        "databrown",
        // A `..` after a symlink is resolved by the kernel from the link's
        // target, which no lexical check can see: refused wherever it is.
        "/datasets/web/../books", "data/a/../b", "data/link/.."}) {
    const absl::Status status =
        CheckPathUnderReadRoots("init_from", path, kRoots);
    EXPECT_TRUE(absl::IsPermissionDenied(status)) << path << ": " << status;
    for (const char* part :
         {"init_from: '", "data/ and models/ of the worker's work directory",
          "/datasets/", "--read_roots"}) {
      EXPECT_TRUE(absl::StrContains(status.message(), part))
          << path << ": " << status;
    }
  }
}

TEST(ReadRootsTest, AUserHasTheClusterRootsAndTheirOwnNotAnothers) {
  ReadRoots roots;
  roots.cluster = {"/datasets"};
  roots.per_user["alice"] = {"/home/alice/data"};
  EXPECT_EQ(roots.For("alice"),
            (std::vector<std::string>{"data", "models", "/datasets",
                                      "/home/alice/data"}));
  EXPECT_TRUE(CheckPathUnderReadRoots("data.path", "/home/alice/data/x",
                                      roots.For("alice"))
                  .ok());
  EXPECT_TRUE(absl::IsPermissionDenied(CheckPathUnderReadRoots(
      "data.path", "/home/alice/data/x", roots.For("bob"))));
}

TEST(ReadRootsTest, DeclaredRootsAreAbsoluteAndNormal) {
  EXPECT_TRUE(CheckDeclaredReadRoot("--read_roots", "/datasets").ok());
  for (const char* root :
       {"/", "datasets", "/a/../b", "/a/./b", "/a/", "", "/data/a,b"}) {
    EXPECT_TRUE(
        absl::IsInvalidArgument(CheckDeclaredReadRoot("--read_roots", root)))
        << root;
  }
}

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root_ + "/good");
    fs::create_directories(root_ + "/evil");
    fs::create_directories(outside_ + "/secret");
    testing::WriteTestFile(root_ + "/good/index.json", "{}");
    testing::WriteTestFile(outside_ + "/secret/key", "k");
  }

  const std::string base_ = testing::MakeTestDirectory("read-roots");
  const std::string root_ = base_ + "/data";
  const std::string outside_ = base_ + "/outside";
  const std::vector<std::string> roots_ = {root_};
};

TEST_F(ResolveTest, ADirectoryBeneathItsRootResolves) {
  fs::create_symlink("good", root_ + "/alias");  // stays beneath
  EXPECT_TRUE(ResolveUnderReadRoots("data.path", root_ + "/good", roots_).ok());
  EXPECT_TRUE(
      ResolveUnderReadRoots("data.path", root_ + "/alias", roots_).ok());
  EXPECT_TRUE(ResolveUnderReadRoots("data.path", root_, roots_).ok());
}

TEST_F(ResolveTest, ASymlinkOutOfTheRootIsRefusedWhereverItPoints) {
  fs::create_symlink(outside_ + "/secret", root_ + "/evil/absolute");
  fs::create_symlink("../../outside/secret", root_ + "/evil/relative");
  fs::create_symlink(outside_, root_ + "/escape");
  fs::create_symlink("/no/such/place", root_ + "/ghost");
  std::vector<std::string> messages;
  for (const std::string& path :
       {root_ + "/evil", root_ + "/escape", root_ + "/ghost"}) {
    const absl::Status status =
        ResolveUnderReadRoots("data.path", path, roots_);
    EXPECT_TRUE(absl::IsPermissionDenied(status)) << path << ": " << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "leads outside " + root_))
        << status;
    messages.push_back(std::string(status.message()));
  }
  // A target that exists reads as one that does not: no oracle.
  EXPECT_EQ(messages[1].substr(messages[1].find(" leads")),
            messages[2].substr(messages[2].find(" leads")));
}

// bob's link to someone else's directory, then `..` back to a name of his
// own: lexically beneath his root, but the kernel would open the target's
// sibling. Refused before anything is resolved.
TEST_F(ResolveTest, ADotDotAfterASymlinkIsRefused) {
  fs::create_directories(outside_ + "/secret/step");
  fs::create_directories(root_ + "/step");
  fs::create_symlink(outside_ + "/secret/step", root_ + "/evil/link");
  const absl::Status status =
      ResolveUnderReadRoots("init_from", root_ + "/evil/link/../step", roots_);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "is not under")) << status;
}

TEST_F(ResolveTest, AMissingPathInsideARootSaysSo) {
  const absl::Status status =
      ResolveUnderReadRoots("data.path", root_ + "/missing", roots_);
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
}

TEST_F(ResolveTest, RelativeRootsAreUnderTheWorkDirectory) {
  const fs::path previous = fs::current_path();
  fs::current_path(base_);
  EXPECT_TRUE(
      ResolveUnderReadRoots("data.path", "data/good", {"data", "models"}).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(
      ResolveUnderReadRoots("data.path", "outside/secret", {"data"})));
  fs::create_symlink("../outside", root_ + "/up");
  EXPECT_TRUE(absl::IsPermissionDenied(
      ResolveUnderReadRoots("data.path", "data/up", {"data"})));
  fs::current_path(previous);
}

}  // namespace
}  // namespace plateau
