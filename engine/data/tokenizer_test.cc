#include "engine/data/tokenizer.h"

#include <string>
#include <vector>

#include "common/test_files.h"
#include "engine/data/test_util.h"
#include "engine/data/tokenizer_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using ::plateau::engine::testing::DocumentsOf;
using ::plateau::engine::testing::GenerateDocuments;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;
using ::testing::HasSubstr;

constexpr int64_t kVocabSize = 300;

TokenizerTrainingOptions Options(int64_t vocab_size) {
  TokenizerTrainingOptions options;
  options.vocab_size = vocab_size;
  return options;
}

std::unique_ptr<Tokenizer> TrainOrDie(const std::vector<std::string>& documents,
                                      int64_t vocab_size) {
  absl::StatusOr<std::string> model =
      TrainTokenizerModel(DocumentsOf(documents), Options(vocab_size));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromSerializedModel(*model, "test model");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

TEST(TokenizerTrainerTest, WritesModelWithRequestedVocabulary) {
  const std::string directory = MakeTestDirectory("tokenizer");
  ASSERT_TRUE(TrainTokenizer(DocumentsOf(GenerateDocuments(200, 1)),
                             Options(kVocabSize), directory)
                  .ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(directory + "/" + kTokenizerFileName);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), kVocabSize);
  // SentencePiece's special pieces, which an export names
  // (hf_export.h).
  EXPECT_EQ((*tokenizer)->unk_id(), 0);
  EXPECT_EQ((*tokenizer)->bos_id(), 1);
  EXPECT_EQ((*tokenizer)->eos_id(), 2);
  EXPECT_EQ((*tokenizer)->Piece(0), "<unk>");
  EXPECT_EQ((*tokenizer)->Piece(1), "<s>");
  EXPECT_EQ((*tokenizer)->Piece(2), "</s>");
}

TEST(TokenizerTrainerTest, SameInputGivesSameModel) {
  const std::vector<std::string> documents = GenerateDocuments(200, 2);
  absl::StatusOr<std::string> first =
      TrainTokenizerModel(DocumentsOf(documents), Options(kVocabSize));
  absl::StatusOr<std::string> second =
      TrainTokenizerModel(DocumentsOf(documents), Options(kVocabSize));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
}

TEST(TokenizerTest, AnyTextRoundTrips) {
  std::unique_ptr<Tokenizer> tokenizer =
      TrainOrDie(GenerateDocuments(200, 3), kVocabSize);
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string& text :
       {std::string("the small cat sees a river."),
        std::string("  two  spaces,\ttabs\nand\n\nnewlines  "),
        std::string("unseen: naïve café ✓ 日本語 \x01"), std::string("")}) {
    std::vector<int32_t> ids;
    ASSERT_TRUE(tokenizer->Encode(text, &ids).ok());
    for (const int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kVocabSize);
      EXPECT_NE(id, 0) << "<unk> in the ids of \"" << text << "\"";
    }
    absl::StatusOr<std::string> decoded = tokenizer->Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, text);
  }
}

TEST(TokenizerTest, MergesFrequentWords) {
  std::unique_ptr<Tokenizer> tokenizer =
      TrainOrDie(GenerateDocuments(300, 4), 320);
  ASSERT_NE(tokenizer, nullptr);
  std::vector<int32_t> ids;
  ASSERT_TRUE(tokenizer->Encode("the", &ids).ok());
  EXPECT_EQ(ids.size(), 1u);
}

TEST(TokenizerTest, LongLinesAreUsedForTraining) {
  // One line far longer than kMaxTrainingSentenceBytes; SentencePiece would
  // drop it whole.
  std::string line;
  for (const std::string& document : GenerateDocuments(300, 5)) {
    line += document + " ";
  }
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  ASSERT_GT(line.size(), 4 * kMaxTrainingSentenceBytes);
  std::unique_ptr<Tokenizer> tokenizer = TrainOrDie({line}, kVocabSize);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), kVocabSize);
}

TEST(TokenizerTest, DecodeRejectsOutOfRangeIds) {
  std::unique_ptr<Tokenizer> tokenizer =
      TrainOrDie(GenerateDocuments(200, 6), kVocabSize);
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<std::string> decoded = tokenizer->Decode({5, kVocabSize});
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("index 1"));
  EXPECT_FALSE(tokenizer->Decode({-1}).ok());
}

TEST(TokenizerTrainerTest, VocabularyTooSmallOrTooLargeIsAnError) {
  const std::vector<std::string> documents = GenerateDocuments(100, 7);
  absl::StatusOr<std::string> too_small =
      TrainTokenizerModel(DocumentsOf(documents), Options(100));
  ASSERT_FALSE(too_small.ok());
  EXPECT_THAT(too_small.status().message(), HasSubstr("vocab_size 100"));
  absl::StatusOr<std::string> too_large =
      TrainTokenizerModel(DocumentsOf(documents), Options(50000));
  ASSERT_FALSE(too_large.ok());
  EXPECT_THAT(too_large.status().message(), HasSubstr("vocab_size 50000"));
  EXPECT_FALSE(TrainTokenizerModel(DocumentsOf(documents), Options(0)).ok());
}

TEST(TokenizerTrainerTest, NoTextIsAnError) {
  EXPECT_FALSE(
      TrainTokenizerModel(DocumentsOf({"", "\n \n"}), Options(kVocabSize))
          .ok());
}

TEST(TokenizerTrainerTest, AnErrorOfTheDocumentsIsReturned) {
  // A corpus file found bad mid-way stops the training with its error.
  const std::vector<std::string> documents = GenerateDocuments(50, 8);
  size_t next = 0;
  const DocumentSource failing =
      [&](std::string* document) -> absl::StatusOr<bool> {
    if (next == documents.size()) {
      return absl::InvalidArgumentError("corpus file x.jsonl line 9: bad");
    }
    *document = documents[next++];
    return true;
  };
  absl::StatusOr<std::string> model =
      TrainTokenizerModel(failing, Options(kVocabSize));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), "corpus file x.jsonl line 9: bad");
}

TEST(TokenizerTest, LoadReportsMissingAndInvalidFiles) {
  const std::string directory = MakeTestDirectory("bad-model");
  absl::StatusOr<std::unique_ptr<Tokenizer>> missing =
      Tokenizer::Load(directory + "/absent.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("absent.model"));
  WriteTestFile(directory + "/garbage.model", "not a model");
  absl::StatusOr<std::unique_ptr<Tokenizer>> garbage =
      Tokenizer::Load(directory + "/garbage.model");
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.status().message(), HasSubstr("garbage.model"));
}

}  // namespace
}  // namespace plateau::engine
