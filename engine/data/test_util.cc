#include "engine/data/test_util.h"

#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/test_files.h"

namespace plateau::engine::testing {
std::vector<std::string> GenerateDocuments(int count, uint32_t seed) {
  static const std::vector<std::string> kDeterminers = {"the", "a", "every",
                                                        "some", "that"};
  static const std::vector<std::string> kAdjectives = {
      "small", "green", "quiet", "heavy", "bright", "old", "warm"};
  static const std::vector<std::string> kNouns = {
      "cat",     "river", "machine", "garden",
      "teacher", "model", "stone",   "window"};
  static const std::vector<std::string> kVerbs = {
      "sees", "moves", "follows", "builds", "finds", "likes", "watches"};
  static const std::vector<std::string> kPrepositions = {"near", "under",
                                                         "behind", "with"};
  std::mt19937 random(seed);
  auto pick = [&random](const std::vector<std::string>& words) {
    return words[random() % words.size()];
  };
  auto noun_phrase = [&] {
    std::string phrase = pick(kDeterminers);
    if (random() % 2 == 0) phrase += " " + pick(kAdjectives);
    return phrase + " " + pick(kNouns);
  };
  std::vector<std::string> documents;
  for (int d = 0; d < count; ++d) {
    std::string document;
    const int paragraphs = 1 + static_cast<int>(random() % 3);
    for (int p = 0; p < paragraphs; ++p) {
      if (p > 0) document += "\n";
      const int sentences = 1 + static_cast<int>(random() % 4);
      for (int s = 0; s < sentences; ++s) {
        if (s > 0) document += " ";
        document += noun_phrase() + " " + pick(kVerbs) + " " + noun_phrase();
        if (random() % 3 == 0) {
          document += ", " + pick(kPrepositions) + " " + noun_phrase();
        }
        document += ".";
      }
    }
    documents.push_back(std::move(document));
  }
  return documents;
}

std::vector<std::string> WriteGeneratedCorpus(const std::string& directory,
                                              int count, uint32_t seed) {
  std::vector<std::string> documents = GenerateDocuments(count, seed);
  for (int d = 0; d < count; ++d) {
    ::plateau::testing::WriteTestFile(
        absl::StrFormat("%s/doc-%03d.txt", directory, d), documents[d]);
  }
  return documents;
}

DocumentSource DocumentsOf(std::vector<std::string> documents) {
  size_t next = 0;
  return [documents = std::move(documents),
          next](std::string* document) mutable -> absl::StatusOr<bool> {
    if (next == documents.size()) return false;
    *document = documents[next++];
    return true;
  };
}

}  // namespace plateau::engine::testing
