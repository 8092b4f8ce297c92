#include "engine/data/token_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/file_util.h"
#include "common/test_files.h"
#include "engine/data/corpus.h"
#include "engine/data/random_token_dataset.h"
#include "engine/data/shard_format.h"
#include "engine/data/shards.h"
#include "engine/data/test_util.h"
#include "engine/data/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;
using ::plateau::engine::testing::WriteGeneratedCorpus;
using ::plateau::engine::testing::WriteUint16Shard;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;
using ::testing::HasSubstr;

constexpr int64_t kVocabSize = 300;

TokenDatasetOptions Verifying() {
  TokenDatasetOptions options;
  options.verify_checksums = true;
  return options;
}

TokenDatasetOptions ExpectingVocabulary(int64_t vocab_size) {
  TokenDatasetOptions options;
  options.expected_vocab_size = vocab_size;
  return options;
}

// The token ids of a shard file, read directly.
std::vector<int32_t> ReadShardTokens(const std::string& path) {
  const std::string bytes = ReadTestFile(path);
  std::vector<int32_t> ids((bytes.size() - kShardHeaderBytes) / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t id;
    std::memcpy(&id, bytes.data() + kShardHeaderBytes + 2 * i, 2);
    ids[i] = id;
  }
  return ids;
}

class TokenDatasetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string root = MakeTestDirectory("token-dataset");
    *corpus_ = WriteGeneratedCorpus(root + "/corpus", 200, 21);
    *dataset_directory_ = root + "/dataset";
    PrepareDatasetOptions options;
    options.input_directory = root + "/corpus";
    options.output_directory = *dataset_directory_;
    options.vocab_size = kVocabSize;
    options.validation_fraction = 0.05;
    options.shard_tokens = 1000;
    const absl::Status status = PrepareDataset(options);
    ASSERT_TRUE(status.ok()) << status;
    const std::string index_path = *dataset_directory_ + "/index.json";
    absl::StatusOr<DatasetIndex> index =
        ParseDatasetIndex(ReadTestFile(index_path), index_path);
    ASSERT_TRUE(index.ok()) << index.status();
    *index_ = *index;
  }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
        TokenDataset::Open(*dataset_directory_);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = std::move(*dataset);
  }

  // The concatenated tokens of one split, read from the shard files.
  static std::vector<int32_t> SplitTokens(const std::string& split) {
    std::vector<int32_t> tokens;
    for (const ShardEntry& shard : index_->shards) {
      if (shard.split != split) continue;
      const std::vector<int32_t> ids =
          ReadShardTokens(*dataset_directory_ + "/" + shard.file);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    }
    return tokens;
  }

  // A copy of the dataset to damage.
  std::string CopyDataset() {
    const std::string copy = MakeTestDirectory("damaged") + "/dataset";
    fs::copy(*dataset_directory_, copy, fs::copy_options::recursive);
    return copy;
  }

  static std::vector<std::string>* corpus_;
  static std::string* dataset_directory_;
  static DatasetIndex* index_;
  std::unique_ptr<TokenDataset> dataset_;
};

std::vector<std::string>* TokenDatasetTest::corpus_ =
    new std::vector<std::string>();
std::string* TokenDatasetTest::dataset_directory_ = new std::string();
DatasetIndex* TokenDatasetTest::index_ = new DatasetIndex();

TEST_F(TokenDatasetTest, ReportsTheIndex) {
  EXPECT_EQ(dataset_->vocab_size(), kVocabSize);
  EXPECT_EQ(dataset_->eos_id(), 2);
  EXPECT_EQ(dataset_->train_tokens(), index_->train_tokens);
  EXPECT_EQ(dataset_->validation_tokens(), index_->validation_tokens);
  EXPECT_EQ(dataset_->train_tokens(),
            static_cast<int64_t>(SplitTokens(kTrainSplit).size()));
  EXPECT_EQ(dataset_->validation_tokens(),
            static_cast<int64_t>(SplitTokens(kValidationSplit).size()));
  EXPECT_DOUBLE_EQ(dataset_->unigram_entropy_nats(),
                   index_->unigram_entropy_nats);
  EXPECT_GT(dataset_->unigram_entropy_nats(), 0.0);
}

TEST_F(TokenDatasetTest, DecodingTheSplitsGivesBackTheCorpus) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(dataset_->tokenizer_path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto decode_documents = [&](const std::vector<int32_t>& tokens) {
    std::vector<std::string> documents;
    std::vector<int32_t> document;
    for (const int32_t id : tokens) {
      if (id != dataset_->eos_id()) {
        document.push_back(id);
        continue;
      }
      absl::StatusOr<std::string> text = (*tokenizer)->Decode(document);
      EXPECT_TRUE(text.ok()) << text.status();
      documents.push_back(text.value_or(""));
      document.clear();
    }
    EXPECT_TRUE(document.empty()) << "the split must end with EOS";
    return documents;
  };
  const std::vector<std::string> train =
      decode_documents(SplitTokens(kTrainSplit));
  const std::vector<std::string> validation =
      decode_documents(SplitTokens(kValidationSplit));
  EXPECT_EQ(static_cast<int64_t>(train.size()), index_->train_documents);
  EXPECT_EQ(static_cast<int64_t>(validation.size()),
            index_->validation_documents);
  EXPECT_EQ(validation.size(), 10u);
  // Each split keeps corpus order, and together they are the corpus.
  std::vector<std::string> merged;
  size_t next_train = 0, next_validation = 0;
  for (const std::string& document : *corpus_) {
    if (next_train < train.size() && train[next_train] == document) {
      merged.push_back(train[next_train++]);
    } else if (next_validation < validation.size() &&
               validation[next_validation] == document) {
      merged.push_back(validation[next_validation++]);
    }
  }
  EXPECT_EQ(merged, *corpus_);
}

TEST_F(TokenDatasetTest, TrainBatchIsAPureFunctionOfSeedAndStep) {
  constexpr int64_t kSequences = 8, kSeqLen = 16;
  auto batch = [&](const TokenDataset& dataset, uint64_t seed, int64_t step) {
    std::vector<int32_t> out(kSequences * (kSeqLen + 1), -1);
    dataset.TrainBatch(seed, step, kSequences, kSeqLen, out.data());
    return out;
  };
  const std::vector<int32_t> first = batch(*dataset_, 1, 5);
  batch(*dataset_, 1, 4);
  batch(*dataset_, 9, 5);
  EXPECT_EQ(batch(*dataset_, 1, 5), first);
  EXPECT_NE(batch(*dataset_, 1, 6), first);
  EXPECT_NE(batch(*dataset_, 2, 5), first);
  absl::StatusOr<std::unique_ptr<TokenDataset>> reopened =
      TokenDataset::Open(*dataset_directory_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(batch(**reopened, 1, 5), first);
  // Rows differ from each other.
  EXPECT_FALSE(std::equal(first.begin(), first.begin() + kSeqLen + 1,
                          first.begin() + kSeqLen + 1));
}

TEST_F(TokenDatasetTest, TrainRowsAreWindowsOfOneShard) {
  std::vector<std::vector<int32_t>> shards;
  for (const ShardEntry& shard : index_->shards) {
    if (shard.split == kTrainSplit) {
      shards.push_back(ReadShardTokens(*dataset_directory_ + "/" + shard.file));
    }
  }
  constexpr int64_t kSequences = 64, kSeqLen = 40;
  std::vector<int32_t> out(kSequences * (kSeqLen + 1));
  dataset_->TrainBatch(3, 0, kSequences, kSeqLen, out.data());
  for (int64_t row = 0; row < kSequences; ++row) {
    const auto row_begin = out.begin() + row * (kSeqLen + 1);
    const auto row_end = row_begin + kSeqLen + 1;
    bool found = false;
    for (const std::vector<int32_t>& shard : shards) {
      found = found || std::search(shard.begin(), shard.end(), row_begin,
                                   row_end) != shard.end();
    }
    EXPECT_TRUE(found) << "row " << row << " is not a window of a train shard";
  }
}

TEST_F(TokenDatasetTest, ValidationWindowsTileTheSplit) {
  const std::vector<int32_t> tokens = SplitTokens(kValidationSplit);
  ASSERT_GE(index_->shards.back().file, "validation-00001.bin")
      << "windows must cross validation shards";
  for (const int64_t seq_len : {1, 7, 64}) {
    const int64_t windows = dataset_->ValidationWindows(seq_len);
    EXPECT_EQ(windows, (static_cast<int64_t>(tokens.size()) - 1) / seq_len);
    std::vector<int32_t> out(seq_len + 1);
    for (int64_t i = 0; i < windows; ++i) {
      dataset_->ValidationWindow(i, seq_len, out.data());
      ASSERT_TRUE(
          std::equal(out.begin(), out.end(), tokens.begin() + i * seq_len))
          << "window " << i << " of seq_len " << seq_len;
    }
  }
  EXPECT_EQ(dataset_->ValidationWindows(static_cast<int64_t>(tokens.size())),
            0);
  EXPECT_EQ(
      dataset_->ValidationWindows(static_cast<int64_t>(tokens.size()) - 1), 1);
}

// A dataset built by hand, with ids that say where they are: train shard s
// holds 100 * s + position.
class HandmadeDatasetTest : public TokenDatasetTest {
 protected:
  void SetUp() override {
    directory_ = MakeTestDirectory("handmade");
    fs::copy_file(*dataset_directory_ + "/tokenizer.model",
                  directory_ + "/tokenizer.model");
    DatasetIndex index = *index_;
    index.shards.clear();
    const std::vector<int64_t> train_sizes = {10, 3, 20};
    for (size_t s = 0; s < train_sizes.size(); ++s) {
      std::vector<uint16_t> ids;
      for (int64_t i = 0; i < train_sizes[s]; ++i) ids.push_back(100 * s + i);
      index.shards.push_back(WriteUint16Shard(directory_, kTrainSplit, s, ids));
    }
    index.shards.push_back(WriteUint16Shard(directory_, kValidationSplit, 0,
                                            {250, 251, 252, 253, 254}));
    index.shards.push_back(WriteUint16Shard(
        directory_, kValidationSplit, 1, {255, 256, 257, 258, 259, 260, 261}));
    index.train_tokens = 33;
    index.validation_tokens = 12;
    WriteTestFile(directory_ + "/index.json", DatasetIndexToJson(index));
    absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
        TokenDataset::Open(directory_, Verifying());
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = std::move(*dataset);
  }

  std::string directory_;
};

TEST_F(HandmadeDatasetTest, StartsAreUniformAndNeverCrossShards) {
  constexpr int64_t kSeqLen = 4;
  // Shard 0: 10 - 4 = 6 starts, shard 1: none, shard 2: 16.
  ASSERT_EQ(dataset_->TrainWindowStarts(kSeqLen), 22);
  constexpr int64_t kSequences = 22000;
  std::vector<int32_t> out(kSequences * (kSeqLen + 1));
  dataset_->TrainBatch(42, 0, kSequences, kSeqLen, out.data());
  std::map<int32_t, int64_t> start_counts;
  for (int64_t row = 0; row < kSequences; ++row) {
    const int32_t* window = out.data() + row * (kSeqLen + 1);
    for (int64_t k = 1; k <= kSeqLen; ++k) {
      ASSERT_EQ(window[k], window[0] + k) << "row " << row << " crosses shards";
    }
    ++start_counts[window[0]];
  }
  ASSERT_EQ(start_counts.size(), 22u);
  for (const auto& [start, count] : start_counts) {
    EXPECT_TRUE((start >= 0 && start <= 5) || (start >= 200 && start <= 215))
        << start;
    // 1000 expected; 5 standard deviations is about 160.
    EXPECT_GT(count, 800) << start;
    EXPECT_LT(count, 1200) << start;
  }
}

TEST_F(HandmadeDatasetTest, ValidationWindowsCrossShards) {
  ASSERT_EQ(dataset_->ValidationWindows(3), 3);  // (12 - 1) / 3
  std::vector<int32_t> out(4);
  dataset_->ValidationWindow(1, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{253, 254, 255, 256}));
  dataset_->ValidationWindow(2, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{256, 257, 258, 259}));
  EXPECT_EQ(dataset_->ValidationWindows(11), 1);
  EXPECT_EQ(dataset_->ValidationWindows(12), 0);
}

TEST_F(TokenDatasetTest, TruncatedShardIsDetected) {
  const std::string copy = CopyDataset();
  const std::string shard = copy + "/train-00001.bin";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_TRUE(absl::IsDataLoss(dataset.status())) << dataset.status();
  EXPECT_THAT(dataset.status().message(), HasSubstr("train-00001.bin"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("truncated"));
  fs::resize_file(shard, 10);
  dataset = TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("truncated"));
}

TEST_F(TokenDatasetTest, MissingShardIsDetected) {
  const std::string copy = CopyDataset();
  fs::remove(copy + "/validation-00000.bin");
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_TRUE(absl::IsNotFound(dataset.status())) << dataset.status();
  EXPECT_THAT(dataset.status().message(),
              HasSubstr("missing shard " + copy + "/validation-00000.bin"));
}

TEST_F(TokenDatasetTest, IndexTamperingIsDetected) {
  const std::string copy = CopyDataset();
  // A token count that disagrees with the shard's header.
  DatasetIndex index = *index_;
  index.shards[0].tokens += 1;
  index.train_tokens += 1;
  WriteTestFile(copy + "/index.json", DatasetIndexToJson(index));
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("train-00000.bin"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("by its header"));

  // Totals that disagree with the shard list.
  index = *index_;
  index.validation_tokens += 1;
  WriteTestFile(copy + "/index.json", DatasetIndexToJson(index));
  dataset = TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("validation_tokens"));

  // A checksum that does not match: found only when verifying.
  index = *index_;
  index.shards[2].sha256 = std::string(64, '0');
  WriteTestFile(copy + "/index.json", DatasetIndexToJson(index));
  EXPECT_TRUE(TokenDataset::Open(copy).ok());
  dataset = TokenDataset::Open(copy, Verifying());
  ASSERT_FALSE(dataset.ok());
  EXPECT_TRUE(absl::IsDataLoss(dataset.status())) << dataset.status();
  EXPECT_THAT(dataset.status().message(), HasSubstr("train-00002.bin"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("SHA-256"));

  // Another format version, and text that is not an index.
  const std::string json = DatasetIndexToJson(*index_);
  WriteTestFile(
      copy + "/index.json",
      absl::StrReplaceAll(json, {{"\"version\": 1", "\"version\": 2"}}));
  dataset = TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("version 2"));
  WriteTestFile(copy + "/index.json", json.substr(0, json.size() / 2));
  dataset = TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("index.json"));
  fs::remove(copy + "/index.json");
  dataset = TokenDataset::Open(copy);
  EXPECT_TRUE(absl::IsNotFound(dataset.status())) << dataset.status();
}

TEST_F(TokenDatasetTest, AlteredShardIsDetectedWhenVerifying) {
  const std::string copy = CopyDataset();
  const std::string shard = copy + "/train-00003.bin";
  std::string bytes = ReadTestFile(shard);
  bytes[kShardHeaderBytes + 7] ^= 1;
  WriteTestFile(shard, bytes);
  EXPECT_TRUE(TokenDataset::Open(copy).ok());
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(copy, Verifying());
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("train-00003.bin"));
}

TEST_F(TokenDatasetTest, OutOfRangeIdsAreDetectedWhenVerifying) {
  const std::string copy = CopyDataset();
  DatasetIndex index = *index_;
  // Rewrite train shard 1 with one id past the vocabulary, and a matching
  // checksum.
  std::vector<int32_t> ids = ReadShardTokens(copy + "/train-00001.bin");
  std::vector<uint16_t> narrow(ids.begin(), ids.end());
  narrow[17] = kVocabSize;
  index.shards[1] = WriteUint16Shard(copy, kTrainSplit, 1, narrow);
  WriteTestFile(copy + "/index.json", DatasetIndexToJson(index));
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(copy, Verifying());
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("train-00001.bin"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("token 17"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("out of range"));
}

TEST_F(TokenDatasetTest, VocabularyMismatchIsDetected) {
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(*dataset_directory_, ExpectingVocabulary(512));
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("vocab mismatch"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("512"));

  const std::string copy = CopyDataset();
  DatasetIndex index = *index_;
  index.vocab_size = 70000;  // a uint32 vocabulary over uint16 shards
  WriteTestFile(copy + "/index.json", DatasetIndexToJson(index));
  dataset = TokenDataset::Open(copy);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("dtype"));
}

TEST(ReadRawTokenFileTest, ReadsLittleEndianUint32Ids) {
  const std::string path = MakeTestDirectory("raw") + "/tokens.bin";
  WriteTestFile(path, std::string("\x01\x00\x00\x00\x2b\x01\x00\x00", 8));
  absl::StatusOr<std::vector<int32_t>> ids = ReadRawTokenFile(path, 300);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 299}));
}

TEST(ReadRawTokenFileTest, ReportsBadFiles) {
  const std::string directory = MakeTestDirectory("raw-bad");
  WriteTestFile(directory + "/odd.bin", std::string("\x01\x00\x00\x00\x02", 5));
  absl::StatusOr<std::vector<int32_t>> ids =
      ReadRawTokenFile(directory + "/odd.bin", 300);
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("odd.bin"));
  EXPECT_THAT(ids.status().message(), HasSubstr("multiple of 4"));

  WriteTestFile(directory + "/range.bin",
                std::string("\x01\x00\x00\x00\x2c\x01\x00\x00", 8));
  ids = ReadRawTokenFile(directory + "/range.bin", 300);
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("id 300 at byte offset 4"));

  WriteTestFile(directory + "/empty.bin", "");
  EXPECT_FALSE(ReadRawTokenFile(directory + "/empty.bin", 300).ok());
  ids = ReadRawTokenFile(directory + "/absent.bin", 300);
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(absl::IsNotFound(ids.status())) << ids.status();
  EXPECT_THAT(ids.status().message(), HasSubstr("absent.bin"));
}

}  // namespace
}  // namespace plateau::engine
