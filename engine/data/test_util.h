// A small generated corpus for the data library's tests (scratch files:
// common/test_files.h). Failures abort the test binary.
#ifndef PLATEAU_ENGINE_DATA_TEST_UTIL_H_
#define PLATEAU_ENGINE_DATA_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/tokenizer_trainer.h"

namespace plateau::engine::testing {

// `count` documents of sentences from a small random grammar (lowercase
// words, spaces, ',', '.', paragraphs separated by '\n'); deterministic in
// `seed`.
std::vector<std::string> GenerateDocuments(int count, uint32_t seed);

// Writes the documents as <directory>/doc-NNN.txt; returns them in the order
// CorpusReader reads them.
std::vector<std::string> WriteGeneratedCorpus(const std::string& directory,
                                              int count, uint32_t seed);

// The documents, in order, as tokenizer training reads them.
DocumentSource DocumentsOf(std::vector<std::string> documents);

}  // namespace plateau::engine::testing

#endif  // PLATEAU_ENGINE_DATA_TEST_UTIL_H_
