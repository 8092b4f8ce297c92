// Files for tests: fresh scratch directories under $TEST_TMPDIR and whole-file
// writes and reads. A test cannot go on without its files, so every failure
// aborts the test binary with a message.
#ifndef PLATEAU_COMMON_TEST_FILES_H_
#define PLATEAU_COMMON_TEST_FILES_H_

#include <string>
#include <vector>

namespace plateau::testing {

// A new empty directory "<TEST_TMPDIR or /tmp>/<prefix>-XXXXXX".
std::string MakeTestDirectory(const std::string& prefix);

// Writes `content` to `path` (replacing it), creating parent directories.
void WriteTestFile(const std::string& path, const std::string& content);

// The whole content of the file at `path`.
std::string ReadTestFile(const std::string& path);

// The names of the entries of `directory`, sorted.
std::vector<std::string> ListTestDirectory(const std::string& directory);

}  // namespace plateau::testing

#endif  // PLATEAU_COMMON_TEST_FILES_H_
