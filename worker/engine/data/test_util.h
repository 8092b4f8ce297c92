// Helpers shared by the data library's tests: scratch directories under
// TEST_TMPDIR and a small generated corpus. Failures abort the test binary.
#ifndef PLATEAU_WORKER_ENGINE_DATA_TEST_UTIL_H_
#define PLATEAU_WORKER_ENGINE_DATA_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace plateau::engine::testing {

// A new empty directory "<TEST_TMPDIR or /tmp>/<prefix>-XXXXXX".
std::string MakeTestDirectory(const std::string& prefix);

// Writes `content` to `path`, creating parent directories.
void WriteTestFile(const std::string& path, const std::string& content);
std::string ReadTestFile(const std::string& path);

// `count` documents of sentences from a small random grammar (lowercase
// words, spaces, ',', '.', paragraphs separated by '\n'); deterministic in
// `seed`.
std::vector<std::string> GenerateDocuments(int count, uint32_t seed);

// Writes the documents as <directory>/doc-NNN.txt; returns them in the order
// ReadCorpusDocuments reads them.
std::vector<std::string> WriteGeneratedCorpus(const std::string& directory,
                                              int count, uint32_t seed);

}  // namespace plateau::engine::testing

#endif  // PLATEAU_WORKER_ENGINE_DATA_TEST_UTIL_H_
