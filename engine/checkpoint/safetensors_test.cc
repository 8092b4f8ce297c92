#include "engine/checkpoint/safetensors.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/test_files.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using ::plateau::testing::ListTestDirectory;
using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  return bytes;
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

// A file as the spec lays it out; `pad` pads the header with spaces so that
// the data starts 8-byte aligned, as the reference writer does.
std::string AssembleFile(std::string header, const std::string& data,
                         bool pad = true) {
  while (pad && (8 + header.size()) % 8 != 0) header.push_back(' ');
  return LittleEndian64(header.size()) + header + data;
}

const std::vector<float> kWeight = {1.0f, 2.0f, 3.0f, 4.0f};
const std::vector<int32_t> kBias = {5, -6};

// What the reference implementation writes for
//   save_file({"weight": float32 [[1, 2], [3, 4]], "bias": int32 [5, -6]},
//             metadata={"format": "pt"})
// It orders tensors by dtype (F32 before I32), then by name.
std::string ReferenceFile() {
  return AssembleFile(
      R"({"__metadata__":{"format":"pt"},)"
      R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("bias":{"dtype":"I32","shape":[2],"data_offsets":[16,24]}})",
      RawBytes(kWeight) + RawBytes(kBias));
}

TEST(SafetensorsTest, ReadsReferenceLayout) {
  const std::string path =
      MakeTestDirectory("safetensors") + "/ref.safetensors";
  WriteTestFile(path, ReferenceFile());
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ((*reader)->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}}));
  const TensorEntry* weight = (*reader)->Find("weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(weight->shape, (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(weight->bytes, 16u);
  EXPECT_EQ(std::memcmp(weight->data, kWeight.data(), 16), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(weight->data) % 8, 0u);
  const TensorEntry* bias = (*reader)->Find("bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->dtype, SafetensorsDtype::kI32);
  EXPECT_EQ(bias->shape, (std::vector<int64_t>{2}));
  ASSERT_EQ(bias->bytes, 8u);
  EXPECT_EQ(std::memcmp(bias->data, kBias.data(), 8), 0);
  EXPECT_EQ((*reader)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, ReadsUnpaddedHeaderAndNoMetadata) {
  // Key order differs from data order; names() follows the data.
  const std::string bytes = AssembleFile(
      R"({"b":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      RawBytes(std::vector<int32_t>{7}) + RawBytes(std::vector<float>{0.5f}),
      /*pad=*/false);
  const std::string path =
      MakeTestDirectory("safetensors") + "/unpadded.safetensors";
  WriteTestFile(path, bytes);
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->names(), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE((*reader)->metadata().empty());
  EXPECT_TRUE((*reader)->Find("b")->shape.empty());
}

TEST(SafetensorsTest, WriterMatchesReferenceLayoutByteForByte) {
  const std::string path =
      MakeTestDirectory("safetensors") + "/out.safetensors";
  const std::vector<TensorView> tensors = {
      {"weight", SafetensorsDtype::kF32, {2, 2}, kWeight.data(), 16},
      {"bias", SafetensorsDtype::kI32, {2}, kBias.data(), 8}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  EXPECT_EQ(ReadTestFile(path), ReferenceFile());
}

TEST(SafetensorsTest, WriterRoundTripsEveryKindOfTensor) {
  const std::string directory = MakeTestDirectory("safetensors");
  const std::string path = directory + "/model.safetensors";
  const std::vector<float> matrix = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> counts = {1, -2, 3, 1 << 30};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x0000};
  const std::vector<double> scalar = {3.25};
  const std::vector<TensorView> tensors = {
      {"layers.0.attn.wq.weight",
       SafetensorsDtype::kF32,
       {2, 3},
       matrix.data(),
       24},
      {"counts", SafetensorsDtype::kI32, {4}, counts.data(), 16},
      {"scalar", SafetensorsDtype::kF64, {}, scalar.data(), 8},
      {"empty", SafetensorsDtype::kF32, {0, 5}, nullptr, 0},
      {"bf16", SafetensorsDtype::kBF16, {3}, bf16.data(), 6},
      {"名前", SafetensorsDtype::kU8, {2}, "ok", 2}};
  const std::map<std::string, std::string> metadata = {{"step", "7"},
                                                       {"note", "é"}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  EXPECT_EQ(ListTestDirectory(directory),
            std::vector<std::string>{"model.safetensors"});

  const std::string bytes = ReadTestFile(path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  EXPECT_EQ((8 + header_bytes) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->metadata(), metadata);
  ASSERT_EQ((*reader)->names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ((*reader)->names()[i], tensors[i].name);
    const TensorEntry* entry = (*reader)->Find(tensors[i].name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->dtype, tensors[i].dtype);
    EXPECT_EQ(entry->shape, tensors[i].shape);
    ASSERT_EQ(entry->bytes, tensors[i].bytes);
    if (entry->bytes > 0) {
      EXPECT_EQ(std::memcmp(entry->data, tensors[i].data, entry->bytes), 0);
    }
  }
}

TEST(SafetensorsTest, WriterReplacesExistingFile) {
  const std::string path =
      MakeTestDirectory("safetensors") + "/out.safetensors";
  const float one = 1.0f;
  const float two = 2.0f;
  ASSERT_TRUE(
      WriteSafetensors(path, {{"x", SafetensorsDtype::kF32, {}, &one, 4}})
          .ok());
  ASSERT_TRUE(
      WriteSafetensors(path, {{"y", SafetensorsDtype::kF32, {}, &two, 4}})
          .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->names(), std::vector<std::string>{"y"});
}

TEST(SafetensorsTest, WriterRejectsBadTensorsAndWritesNothing) {
  const float values[2] = {1, 2};
  struct Case {
    std::vector<TensorView> tensors;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{{"", SafetensorsDtype::kF32, {2}, values, 8}}, "empty name"},
      {{{"a", SafetensorsDtype::kF32, {2}, values, 8},
        {"a", SafetensorsDtype::kF32, {2}, values, 8}},
       "duplicate tensor name 'a'"},
      {{{"__metadata__", SafetensorsDtype::kF32, {2}, values, 8}}, "reserved"},
      {{{"a", SafetensorsDtype::kF32, {3}, values, 8}},
       "F32 [3] needs 12 bytes but the data has 8"},
      {{{"a", SafetensorsDtype::kI32, {-2}, values, 8}}, "negative dimension"},
      {{{"a", SafetensorsDtype::kF32, {2}, nullptr, 8}}, "data is null"},
      {{{"bad\xff", SafetensorsDtype::kF32, {2}, values, 8}}, "UTF-8"},
  };
  const std::string directory = MakeTestDirectory("safetensors");
  const std::string path = directory + "/bad.safetensors";
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.message);
    const absl::Status status = WriteSafetensors(path, test_case.tensors);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(path), std::string::npos) << status;
    EXPECT_NE(status.message().find(test_case.message), std::string::npos)
        << status;
    EXPECT_TRUE(ListTestDirectory(directory).empty());
  }
}

struct CorruptCase {
  const char* label;
  std::string bytes;
  const char* message;
};

std::vector<CorruptCase> CorruptCases() {
  const std::string good = ReferenceFile();
  const std::string data8 = RawBytes(std::vector<float>{1, 2});
  const std::string data12 = RawBytes(std::vector<float>{1, 2, 3});
  return {
      {"truncated data", good.substr(0, good.size() - 4),
       "run past the end of the data region"},
      {"truncated header", good.substr(0, 20), "runs past the end of the file"},
      {"shorter than the length", "abc", "fewer than the 8-byte"},
      {"huge header length", LittleEndian64(200'000'000) + "{}",
       "exceeds the limit"},
      {"bad JSON", AssembleFile(R"({"a": {"dtype": )", ""), "not valid JSON"},
      {"not an object", AssembleFile("[1, 2]", ""), "does not start with '{'"},
      {"overlapping offsets",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    data12),
       "overlap tensor 'a'"},
      {"offsets past end",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[3],)"
                    R"("data_offsets":[0,12]}})",
                    data8),
       "run past the end of the data region (8 bytes)"},
      {"wrong byte count",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[3],)"
                    R"("data_offsets":[0,8]}})",
                    data8),
       "F32 [3] needs 12 bytes but data_offsets [0, 8] hold 8"},
      {"gap",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                    data12),
       "gap in the data region"},
      {"trailing bytes",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[1],)"
                    R"("data_offsets":[0,4]}})",
                    data8),
       "trailing bytes"},
      {"unknown dtype",
       AssembleFile(R"({"a":{"dtype":"Q7","shape":[1],)"
                    R"("data_offsets":[0,4]}})",
                    data8.substr(0, 4)),
       "unknown dtype \"Q7\""},
      {"negative dimension",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[-1],)"
                    R"("data_offsets":[0,4]}})",
                    data8.substr(0, 4)),
       "not a size"},
      {"reversed offsets",
       AssembleFile(R"({"a":{"dtype":"F32","shape":[1],)"
                    R"("data_offsets":[4,0]}})",
                    data8.substr(0, 4)),
       "end before they begin"},
      {"metadata not strings",
       AssembleFile(R"({"__metadata__":{"step":7}})", ""), "is not a string"},
  };
}

TEST(SafetensorsTest, CorruptFilesGiveClearErrors) {
  const std::string directory = MakeTestDirectory("safetensors");
  for (const CorruptCase& test_case : CorruptCases()) {
    SCOPED_TRACE(test_case.label);
    const std::string path = directory + "/corrupt.safetensors";
    WriteTestFile(path, test_case.bytes);
    absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
        SafetensorsReader::Open(path);
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss)
        << reader.status();
    EXPECT_NE(reader.status().message().find(path), std::string::npos)
        << reader.status();
    EXPECT_NE(reader.status().message().find(test_case.message),
              std::string::npos)
        << reader.status();
  }
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  const std::string path =
      MakeTestDirectory("safetensors") + "/missing.safetensors";
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(path);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(reader.status().message().find(path), std::string::npos);
}

TEST(SafetensorsTest, DtypeNamesRoundTrip) {
  for (const char* name : {"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16",
                           "I32", "U32", "F32", "I64", "U64", "F64"}) {
    absl::StatusOr<SafetensorsDtype> dtype = ParseSafetensorsDtype(name);
    ASSERT_TRUE(dtype.ok()) << name;
    EXPECT_EQ(SafetensorsDtypeName(*dtype), name);
  }
  EXPECT_EQ(SafetensorsDtypeBytes(SafetensorsDtype::kBF16), 2u);
  EXPECT_EQ(SafetensorsDtypeBytes(SafetensorsDtype::kI32), 4u);
  EXPECT_FALSE(ParseSafetensorsDtype("f32").ok());
}

}  // namespace
}  // namespace plateau::engine
