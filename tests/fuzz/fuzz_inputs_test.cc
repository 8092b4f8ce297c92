// Runs the job spec fuzz target over its seed corpus and every regression
// input (crashes the fuzzer found, kept as files), in the normal test run.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::filesystem::path> Inputs() {
  std::vector<std::filesystem::path> inputs;
  for (const char* directory :
       {"tests/fuzz/job_spec_corpus", "tests/fuzz/job_spec_regressions"}) {
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
      if (entry.is_regular_file()) inputs.push_back(entry.path());
    }
  }
  return inputs;
}

TEST(JobSpecFuzzInputsTest, EveryKeptInputPasses) {
  const std::vector<std::filesystem::path> inputs = Inputs();
  ASSERT_GE(inputs.size(), 3u);
  for (const std::filesystem::path& path : inputs) {
    std::ifstream file(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    SCOPED_TRACE(path.string());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
}

}  // namespace
