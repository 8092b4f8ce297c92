#include "engine/data/shards.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/test_files.h"
#include "engine/data/shard_format.h"
#include "engine/data/test_util.h"
#include "engine/data/token_dataset.h"
#include "engine/data/tokenizer.h"
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
    documents_ = WriteGeneratedCorpus(options_.input_directory, 200, 11);
  }

  // The corpus's ids as another pipeline would store them: every document
  // encoded by the dataset's tokenizer (prepared first) and followed by its
  // end-of-document id, in the corpus's order.
  std::vector<uint16_t> CorpusIds() {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(
        options_.output_directory + "/" + std::string(kTokenizerFileName));
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    std::vector<uint16_t> stream;
    for (const std::string& document : documents_) {
      std::vector<int32_t> ids;
      EXPECT_TRUE((*tokenizer)->Encode(document, &ids).ok());
      ids.push_back((*tokenizer)->eos_id());
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
    return stream;
  }

  // Options that prepare `files` (token arrays) as options_ prepares the
  // corpus, into root_/name.
  PrepareDatasetOptions TokenArrayOptions(std::vector<std::string> files,
                                          const std::string& name) {
    PrepareDatasetOptions options = options_;
    options.input_directory.clear();
    options.token_files = std::move(files);
    options.output_directory = root_ + "/" + name;
    options.separator_id = 2;  // the trained tokenizer's end of document
    return options;
  }

  // Every file of options_'s dataset is in `directory`, the same, but those
  // named in `unlike`.
  void ExpectSameFiles(const std::string& directory,
                       const std::vector<std::string>& unlike = {}) {
    for (const std::string& name :
         ListTestDirectory(options_.output_directory)) {
      if (std::find(unlike.begin(), unlike.end(), name) != unlike.end()) {
        continue;
      }
      EXPECT_EQ(ReadTestFile(options_.output_directory + "/" + name),
                ReadTestFile(directory + "/" + name))
          << directory << "/" << name;
    }
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
  std::vector<std::string> documents_;
};

std::string NpyOf(const std::vector<uint16_t>& ids) {
  std::string header = "{'descr': '<u2', 'fortran_order': False, 'shape': (" +
                       std::to_string(ids.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header +
         std::string(reinterpret_cast<const char*>(ids.data()),
                     ids.size() * sizeof(uint16_t));
}

std::string RawOf(const std::vector<uint16_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()),
                     ids.size() * sizeof(uint16_t));
}

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

// The corpus's ids, brought as token arrays, make the corpus's dataset:
// the same documents held out, the same shards and index. Whether in one
// .npy, cut mid-document over two files, or raw with a stated width; with
// the tokenizer given, or without one (then the index names none).
TEST_F(PrepareDatasetTest, TokenArraysMakeTheDatasetTheirIdsCameFrom) {
  ASSERT_TRUE(PrepareDataset(options_).ok());
  const std::vector<uint16_t> ids = CorpusIds();
  const std::string tokenizer =
      options_.output_directory + "/" + std::string(kTokenizerFileName);
  WriteTestFile(root_ + "/ids/all.npy", NpyOf(ids));
  const size_t cut = ids.size() / 3 + 1;
  ASSERT_NE(ids[cut - 1], 2) << "the cut must fall inside a document";
  WriteTestFile(root_ + "/ids/first.npy",
                NpyOf(std::vector<uint16_t>(ids.begin(), ids.begin() + cut)));
  WriteTestFile(root_ + "/ids/rest.bin",
                RawOf(std::vector<uint16_t>(ids.begin() + cut, ids.end())));

  PrepareDatasetOptions npy =
      TokenArrayOptions({root_ + "/ids/all.npy"}, "npy");
  npy.tokenizer_model = tokenizer;
  ASSERT_TRUE(PrepareDataset(npy).ok()) << PrepareDataset(npy);
  ExpectSameFiles(npy.output_directory);

  PrepareDatasetOptions split = TokenArrayOptions(
      {root_ + "/ids/first.npy", root_ + "/ids/rest.bin"}, "split");
  split.tokenizer_model = tokenizer;
  split.vocab_size = 0;  // the tokenizer's
  split.separator_id = -1;
  split.token_bytes = 2;
  ASSERT_TRUE(PrepareDataset(split).ok()) << PrepareDataset(split);
  ExpectSameFiles(split.output_directory);

  PrepareDatasetOptions untokenized =
      TokenArrayOptions({root_ + "/ids/all.npy"}, "untokenized");
  ASSERT_TRUE(PrepareDataset(untokenized).ok());
  ExpectSameFiles(untokenized.output_directory,
                  {"index.json", std::string(kTokenizerFileName)});
  EXPECT_FALSE(fs::exists(untokenized.output_directory + "/" +
                          std::string(kTokenizerFileName)));
  DatasetIndex expected = ReadIndex(options_.output_directory);
  expected.tokenizer_file.clear();
  EXPECT_EQ(ReadTestFile(untokenized.output_directory + "/index.json"),
            DatasetIndexToJson(expected));
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(untokenized.output_directory);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->tokenizer_path(), "");
  EXPECT_EQ((*dataset)->train_tokens(), expected.train_tokens);

  // The last document without its separator gets it.
  WriteTestFile(root_ + "/ids/unended.npy",
                NpyOf(std::vector<uint16_t>(ids.begin(), ids.end() - 1)));
  PrepareDatasetOptions unended =
      TokenArrayOptions({root_ + "/ids/unended.npy"}, "unended");
  unended.tokenizer_model = tokenizer;
  ASSERT_TRUE(PrepareDataset(unended).ok());
  ExpectSameFiles(unended.output_directory);
}

// nanoGPT's train.bin and val.bin: the validation split is the second
// file's ids, all of them, and no train document is held out.
TEST_F(PrepareDatasetTest, TokenArraysMayBringTheirOwnValidationSplit) {
  const std::vector<uint16_t> train = {5, 6, 2, 7, 2, 8, 9, 10, 2};
  const std::vector<uint16_t> validation = {11, 12, 2, 13};
  WriteTestFile(root_ + "/train.bin", RawOf(train));
  WriteTestFile(root_ + "/val.bin", RawOf(validation));
  PrepareDatasetOptions options =
      TokenArrayOptions({root_ + "/train.bin"}, "own");
  options.validation_token_files = {root_ + "/val.bin"};
  options.token_bytes = 2;
  options.vocab_size = 14;
  ASSERT_TRUE(PrepareDataset(options).ok()) << PrepareDataset(options);
  const DatasetIndex index = ReadIndex(options.output_directory);
  EXPECT_EQ(index.train_documents, 3);
  EXPECT_EQ(index.validation_documents, 2);
  EXPECT_EQ(index.train_tokens, 9);
  EXPECT_EQ(index.validation_tokens, 5);  // 13 gets its separator
  EXPECT_EQ(index.eos_id, 2);
  EXPECT_EQ(index.tokenizer_file, "");
  const std::string shard =
      ReadTestFile(options.output_directory + "/validation-00000.bin");
  EXPECT_EQ(shard.substr(kShardHeaderBytes), RawOf({11, 12, 2, 13, 2}));
}

TEST_F(PrepareDatasetTest, TokenArraysThatCannotServeAreRefused) {
  WriteTestFile(root_ + "/train.bin", RawOf({5, 6, 2, 7, 300, 2, 8}));
  PrepareDatasetOptions options =
      TokenArrayOptions({root_ + "/train.bin"}, "refused");
  options.token_bytes = 2;
  absl::Status status = PrepareDataset(options);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(root_ + "/train.bin: id 300 at index 4 is outside "
                                "the vocabulary of 300"));
  EXPECT_FALSE(fs::exists(options.output_directory));

  options.token_bytes = 0;  // raw, and no width stated
  EXPECT_THAT(PrepareDataset(options).message(),
              HasSubstr("has no .npy header: state the width"));

  WriteTestFile(root_ + "/one.bin", RawOf({5, 6, 7}));
  PrepareDatasetOptions one = TokenArrayOptions({root_ + "/one.bin"}, "one");
  one.token_bytes = 2;
  EXPECT_THAT(PrepareDataset(one).message(),
              HasSubstr("hold 1 document (separator id 2); at least 2"));

  PrepareDatasetOptions unnamed = one;
  unnamed.separator_id = -1;  // and no tokenizer to take it from
  EXPECT_THAT(PrepareDataset(unnamed).message(),
              HasSubstr("need their vocabulary size and document separator"));

  PrepareDatasetOptions both = one;
  both.input_directory = options_.input_directory;
  EXPECT_THAT(PrepareDataset(both).message(),
              HasSubstr("a corpus directory or token array files, one of"));

  PrepareDatasetOptions wide = one;
  wide.token_bytes = 3;
  EXPECT_THAT(PrepareDataset(wide).message(),
              HasSubstr("2 or 4 bytes wide, not 3"));

  PrepareDatasetOptions inside = one;
  inside.output_directory = root_;
  inside.overwrite = true;
  EXPECT_THAT(PrepareDataset(inside).message(),
              HasSubstr("contains the input"));
  EXPECT_TRUE(fs::exists(root_ + "/one.bin"));
  EXPECT_THAT(ListTestDirectory(root_),
              ElementsAre("corpus", "one.bin", "train.bin"));
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
