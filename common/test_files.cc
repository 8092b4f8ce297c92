#include "common/test_files.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace plateau::testing {
namespace {

void Die(const std::string& message) {
  std::fprintf(stderr, "test_files: %s\n", message.c_str());
  std::abort();
}

}  // namespace

std::string MakeTestDirectory(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(
      base != nullptr && *base != '\0' ? base : "/tmp", "/", prefix, "-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) Die("mkdtemp " + pattern);
  return pattern;
}

void WriteTestFile(const std::string& path, const std::string& content) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      error);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << content;
  file.close();
  if (!file.good()) Die("cannot write " + path);
}

std::string ReadTestFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file.good()) Die("cannot read " + path);
  std::ostringstream content;
  content << file.rdbuf();
  return content.str();
}

std::vector<std::string> ListTestDirectory(const std::string& directory) {
  std::vector<std::string> names;
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end;
       !error && it != end; it.increment(error)) {
    names.push_back(it->path().filename().string());
  }
  if (error) Die("cannot list " + directory + ": " + error.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace plateau::testing
