#include "engine/data/shards.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/test_files.h"
#include "engine/data/shard_format.h"
#include "engine/data/test_util.h"
#include "engine/data/tokenizer_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;
using ::plateau::engine::testing::WriteGeneratedCorpus;
using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PrepareDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTestDirectory("prepare");
    options_.input_directory = root_ + "/corpus";
    options_.output_directory = root_ + "/dataset";
    options_.vocab_size = 300;
    options_.validation_fraction = 0.05;
    options_.shard_tokens = 4000;
    WriteGeneratedCorpus(options_.input_directory, 200, 11);
  }

  DatasetIndex ReadIndex(const std::string& directory) {
    const std::string path = directory + "/" + kIndexFileName;
    absl::StatusOr<DatasetIndex> index =
        ParseDatasetIndex(ReadTestFile(path), path);
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? *index : DatasetIndex();
  }

  std::string root_;
  PrepareDatasetOptions options_;
};

TEST_F(PrepareDatasetTest, WritesShardsTokenizerAndIndex) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  const DatasetIndex index = ReadIndex(options_.output_directory);
  EXPECT_EQ(index.vocab_size, 300);
  EXPECT_EQ(index.dtype, "uint16");
  EXPECT_EQ(index.eos_id, 2);
  EXPECT_EQ(index.tokenizer_file, "tokenizer.model");
  EXPECT_EQ(index.train_documents, 190);
  EXPECT_EQ(index.validation_documents, 10);
  EXPECT_GT(index.train_tokens, 2 * options_.shard_tokens);
  EXPECT_GT(index.validation_tokens, 0);
  // A few dozen distinct tokens with skewed frequencies.
  EXPECT_GT(index.unigram_entropy_nats, 2.0);
  EXPECT_LT(index.unigram_entropy_nats, std::log(300.0));

  int64_t train_shards = 0;
  for (const ShardEntry& shard : index.shards) {
    const std::string bytes =
        ReadTestFile(options_.output_directory + "/" + shard.file);
    EXPECT_EQ(bytes.size(), kShardHeaderBytes + 2 * shard.tokens);
    EXPECT_EQ(bytes.substr(0, 8), "PLTOKENS");
    if (shard.split == kTrainSplit) {
      EXPECT_EQ(shard.file, ShardFileName(kTrainSplit, train_shards));
      ++train_shards;
    }
  }
  // Shards hold shard_tokens each, the last of a split fewer.
  ASSERT_GE(train_shards, 3);
  for (int64_t i = 0; i + 1 < train_shards; ++i) {
    EXPECT_EQ(index.shards[i].tokens, options_.shard_tokens);
  }
  EXPECT_EQ(index.shards.size(), static_cast<size_t>(train_shards + 1));
  EXPECT_EQ(index.shards.back().file, "validation-00000.bin");
  EXPECT_THAT(ListTestDirectory(root_), ElementsAre("corpus", "dataset"))
      << "no temporary directory may be left behind";
  EXPECT_NE(fs::status(options_.output_directory).permissions() &
                fs::perms::others_read,
            fs::perms::none);
}

TEST_F(PrepareDatasetTest, SameInputGivesSameFiles) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  PrepareDatasetOptions again = options_;
  again.output_directory = root_ + "/again";
  again.encode_threads = 3;  // the thread count must not matter
  ASSERT_TRUE(PrepareDataset(again).ok());
  const std::vector<std::string> names =
      ListTestDirectory(options_.output_directory);
  EXPECT_EQ(names, ListTestDirectory(again.output_directory));
  for (const std::string& name : names) {
    EXPECT_EQ(ReadTestFile(options_.output_directory + "/" + name),
              ReadTestFile(again.output_directory + "/" + name))
        << name;
  }
}

// A dataset prepared with another's tokenizer (as one would bring a
// model's) is that dataset, file for file: the same model, the same ids.
TEST_F(PrepareDatasetTest, AGivenTokenizerEncodesAsTheOneItWasTrainedAs) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  PrepareDatasetOptions given = options_;
  given.output_directory = root_ + "/given";
  given.vocab_size = 0;  // the tokenizer's
  given.tokenizer_model =
      options_.output_directory + "/" + std::string(kTokenizerFileName);
  ASSERT_TRUE(PrepareDataset(given).ok()) << PrepareDataset(given);
  const std::vector<std::string> names =
      ListTestDirectory(options_.output_directory);
  EXPECT_EQ(names, ListTestDirectory(given.output_directory));
  for (const std::string& name : names) {
    EXPECT_EQ(ReadTestFile(options_.output_directory + "/" + name),
              ReadTestFile(given.output_directory + "/" + name))
        << name;
  }
  given.output_directory = root_ + "/sized";
  given.vocab_size = 300;  // the same size, said
  EXPECT_TRUE(PrepareDataset(given).ok());
}

TEST_F(PrepareDatasetTest, AGivenTokenizerThatCannotServeIsRefused) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  PrepareDatasetOptions given = options_;
  given.output_directory = root_ + "/given";
  given.tokenizer_model =
      options_.output_directory + "/" + std::string(kTokenizerFileName);
  given.vocab_size = 512;
  absl::Status status = PrepareDataset(given);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("has 300 ids, not the 512"));

  given.vocab_size = 0;
  given.tokenizer_model = root_ + "/absent.model";
  status = PrepareDataset(given);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("cannot read the tokenizer"));

  given.tokenizer_model = root_ + "/corpus/doc-000.txt";
  status = PrepareDataset(given);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("is not a SentencePiece model"));
  EXPECT_FALSE(fs::exists(given.output_directory));

  // Without a tokenizer, a vocabulary size is needed.
  PrepareDatasetOptions untrained = options_;
  untrained.output_directory = root_ + "/untrained";
  untrained.vocab_size = 0;
  status = PrepareDataset(untrained);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("vocab_size must be in [1, 2^31)"));
}

TEST_F(PrepareDatasetTest, SeedChoosesOtherValidationDocuments) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  PrepareDatasetOptions other = options_;
  other.output_directory = root_ + "/other";
  other.seed = 7;
  ASSERT_TRUE(PrepareDataset(other).ok());
  EXPECT_NE(ReadIndex(options_.output_directory).validation_tokens,
            ReadIndex(other.output_directory).validation_tokens);
}

TEST_F(PrepareDatasetTest, AtLeastOneValidationDocument) {
  options_.validation_fraction = 1e-6;
  ASSERT_TRUE(PrepareDataset(options_).ok());
  EXPECT_EQ(ReadIndex(options_.output_directory).validation_documents, 1);
}

TEST_F(PrepareDatasetTest, RefusesToOverwriteUnlessAsked) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  const std::string index_before =
      ReadTestFile(options_.output_directory + "/index.json");
  options_.seed = 5;
  absl::Status status = PrepareDataset(options_);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(options_.output_directory));
  EXPECT_EQ(ReadTestFile(options_.output_directory + "/index.json"),
            index_before);

  options_.overwrite = true;
  ASSERT_TRUE(PrepareDataset(options_).ok());
  EXPECT_NE(ReadTestFile(options_.output_directory + "/index.json"),
            index_before);
  EXPECT_THAT(ListTestDirectory(root_), ElementsAre("corpus", "dataset"));
}

TEST_F(PrepareDatasetTest, ReplacesEmptyDirectoryAndCreatesParents) {
  fs::create_directories(options_.output_directory);
  ASSERT_TRUE(PrepareDataset(options_).ok());
  options_.output_directory = root_ + "/a/b/dataset/";
  ASSERT_TRUE(PrepareDataset(options_).ok());
  EXPECT_TRUE(fs::exists(root_ + "/a/b/dataset/index.json"));
}

TEST_F(PrepareDatasetTest, FailureLeavesNothingBehind) {
  options_.vocab_size = 100000;  // more than this corpus can fill
  absl::Status status = PrepareDataset(options_);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("vocab_size 100000"));
  EXPECT_THAT(ListTestDirectory(root_), ElementsAre("corpus"));
}

TEST_F(PrepareDatasetTest, RefusesOutputThatHoldsTheCorpus) {
  options_.output_directory = root_;
  options_.overwrite = true;
  absl::Status status = PrepareDataset(options_);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("contains the input"));
  EXPECT_TRUE(fs::exists(options_.input_directory + "/doc-000.txt"));
}

TEST_F(PrepareDatasetTest, RejectsBadOptions) {
  PrepareDatasetOptions bad = options_;
  bad.validation_fraction = 0.0;
  EXPECT_FALSE(PrepareDataset(bad).ok());
  bad = options_;
  bad.validation_fraction = 1.0;
  EXPECT_FALSE(PrepareDataset(bad).ok());
  bad = options_;
  bad.shard_tokens = 0;
  EXPECT_FALSE(PrepareDataset(bad).ok());
  bad = options_;
  bad.input_directory = root_ + "/absent";
  absl::Status status = PrepareDataset(bad);
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
}

TEST_F(PrepareDatasetTest, SingleDocumentIsAnError) {
  const std::string corpus = root_ + "/one";
  WriteTestFile(corpus + "/only.txt", "the only document.");
  options_.input_directory = corpus;
  absl::Status status = PrepareDataset(options_);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("at least 2"));
}

TEST(ShardFormatTest, HeaderRoundTrips) {
  ShardHeader header;
  header.bytes_per_token = 4;
  header.tokens = 0x0102030405060708ULL;
  uint8_t bytes[kShardHeaderBytes];
  EncodeShardHeader(header, bytes);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(bytes), 8), "PLTOKENS");
  EXPECT_EQ(bytes[8], 1);      // version, little-endian
  EXPECT_EQ(bytes[12], 4);     // bytes per token
  EXPECT_EQ(bytes[16], 0x08);  // token count, little-endian
  absl::StatusOr<ShardHeader> decoded =
      DecodeShardHeader(bytes, sizeof(bytes), "shard");
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->version, 1u);
  EXPECT_EQ(decoded->bytes_per_token, 4u);
  EXPECT_EQ(decoded->tokens, header.tokens);
  EXPECT_FALSE(DecodeShardHeader(bytes, 23, "shard").ok());
  bytes[0] = 'X';
  EXPECT_FALSE(DecodeShardHeader(bytes, sizeof(bytes), "shard").ok());
}

TEST(ShardFormatTest, DtypeFollowsVocabularySize) {
  EXPECT_EQ(BytesPerToken(65536), 2u);
  EXPECT_EQ(BytesPerToken(65537), 4u);
  EXPECT_EQ(TokenDtypeName(2), "uint16");
  EXPECT_EQ(TokenDtypeName(4), "uint32");
  EXPECT_EQ(ShardFileName("train", 3), "train-00003.bin");
}

}  // namespace
}  // namespace plateau::engine
