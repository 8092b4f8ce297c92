// CpuOps' bf16 matrix products (GemmPrecision::kBf16). An operand given as
// bf16 (GemmArgs::a_bf16, b_bf16) is read where it is, in any layout and
// with any leading dimension; a float32 one is converted to a dense bf16
// copy in the scratch arena, within the staging bytes
// (SetMatmulStagingBytes), a tile at a time:
//   - each product is cut into tiles of whole rows of c and, only when a
//     float32 b is too large to stage whole, of column blocks; a tile's
//     blocks keep their operand's layout (the kernels take a and b either way
//     round, and a transposing copy of a cost a weight gradient's product a
//     fifth to a quarter of its time: docs/BENCHMARKS.md): a's block is
//     [rows, k] row-major, or stored [k, rows]; b's is [k, columns] or
//     [columns, k];
//   - tiles are taken in order into rounds that fit the staging; a round
//     converts its blocks (a block that several tiles or products of the
//     round read, such as the rows an expert's gate and up projections
//     share, once), then runs its tiles, cut along rows into pieces set by
//     their size alone (never by the thread count, so the results are not
//     either) and dealt to the pool's threads by work as the float32
//     GroupedGemm does, each piece a single-threaded oneDNN call of a kernel
//     made once for any size, reading its blocks and writing c in place;
//   - a product written in bf16 (GemmArgs::c_bf16) makes each tile in a
//     dense float32 copy, and each piece rounds its rows of the copy into
//     c_bf16 as soon as it has made them, so the float32 values of c never
//     take more than the staging.
// Reading bf16 operands in place rather than copying them is the same
// kernel on the same values: the same bits. Where oneDNN has no bf16 kernel
// for this CPU, every block is copied, rounded to bf16 (bf16 operands
// widened) but kept as float32, and the pieces run through OpenBLAS.
#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas_split.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::kernels::cpu {
namespace {

// Pieces and tiles are whole multiples of this many rows (and columns).
constexpr int64_t kGrain = 16;
// Pieces are at least this many rows: oneDNN's bf16 products lose 5-10%
// here against 1024 rows and 11-16% at 64 (docs/BENCHMARKS.md, "The same
// bits at any thread count"), and the vocabulary's 256-token blocks are
// still shared by two threads. (Where oneDNN has no bf16 kernel the pieces
// run through OpenBLAS, whose AVX2 kernels lose nothing at 128 rows.)
constexpr int64_t kMinPieceRows = 128;
// Below this many elements a block is converted on the calling thread.
constexpr int64_t kSerialConversionElements = 1 << 15;
// Every copy in the scratch starts on a cache line.
constexpr int64_t kAlignmentBytes = 64;

int64_t Aligned(int64_t bytes) {
  return (bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes;
}

// A block of an operand: the [rows, columns] matrix at `from` (float32) or
// `from_bf16` (row stride `stride`), converted into the scratch at `offset`
// as a dense matrix; or, in_place, a bf16 block read where it is.
struct Conversion {
  // The block `offset` elements into the operand (float32 or bf16).
  static Conversion Of(const float* from, const uint16_t* from_bf16,
                       int64_t offset, int64_t rows, int64_t columns,
                       int64_t stride, bool in_place) {
    return {from == nullptr ? nullptr : from + offset,
            from_bf16 == nullptr ? nullptr : from_bf16 + offset,
            rows,
            columns,
            stride,
            in_place};
  }

  const float* from;
  const uint16_t* from_bf16;
  int64_t rows;
  int64_t columns;
  int64_t stride;
  bool in_place;
  int64_t offset = 0;

  int64_t elements() const { return rows * columns; }
  bool SameAs(const Conversion& other) const {
    return from == other.from && from_bf16 == other.from_bf16 &&
           rows == other.rows && columns == other.columns &&
           stride == other.stride;
  }
};

// Whether an operand is read where it is: given in bf16, for oneDNN (whose
// kernels take any layout and leading dimension).
bool AInPlace(const GemmArgs& args, bool with_onednn) {
  return with_onednn && args.a_bf16 != nullptr;
}
bool BInPlace(const GemmArgs& args, bool with_onednn) {
  return with_onednn && args.b_bf16 != nullptr;
}

// Rows [row_begin, row_end) and columns [column_begin, column_end) of one
// product's c.
struct Tile {
  const GemmArgs* args;
  const OneDnnMatmul* matmul;
  int64_t row_begin, row_end;
  int64_t column_begin, column_end;

  int64_t rows() const { return row_end - row_begin; }
  int64_t columns() const { return column_end - column_begin; }
  // The pieces the tile runs as, cut along its rows by its size alone.
  int parts() const {
    return PiecesOfProduct(rows() * columns() * args->k, rows(), kMinPieceRows);
  }
  Conversion ABlock() const {
    const GemmArgs& a = *args;
    const bool in_place = AInPlace(a, matmul != nullptr);
    // a as [m, k] row-major; stored [k, m] when transposed, which the kernel
    // takes as it is.
    return a.transpose_a == Transpose::kNo
               ? Conversion::Of(a.a, a.a_bf16, row_begin * a.lda, rows(), a.k,
                                a.lda, in_place)
               : Conversion::Of(a.a, a.a_bf16, row_begin, a.k, rows(), a.lda,
                                in_place);
  }
  Conversion BBlock() const {
    const GemmArgs& a = *args;
    const bool in_place = BInPlace(a, matmul != nullptr);
    // b as stored: [k, n], or [n, k] when transposed.
    return a.transpose_b == Transpose::kNo
               ? Conversion::Of(a.b, a.b_bf16, column_begin, a.k, columns(),
                                a.ldb, in_place)
               : Conversion::Of(a.b, a.b_bf16, column_begin * a.ldb, columns(),
                                a.k, a.ldb, in_place);
  }
};

// A tile in a round: where its blocks and its float32 c are.
struct PlacedTile {
  const Tile* tile;
  size_t a;  // index into the round's conversions
  size_t b;
  int64_t c_offset = -1;  // a dense float32 tile of a c_bf16 product, or -1
};

struct Piece {
  const PlacedTile* placed;
  int64_t begin;  // rows of the tile
  int64_t end;
};

// c = beta c, for a product over nothing (k = 0).
void ScaleRows(const GemmArgs& args) {
  for (int64_t row = 0; row < args.m; ++row) {
    if (args.c_bf16 != nullptr) {  // beta is 0
      std::fill_n(args.c_bf16 + row * args.ldc, args.n, uint16_t{0});
      continue;
    }
    float* c = args.c + row * args.ldc;
    for (int64_t column = 0; column < args.n; ++column) {
      c[column] = args.beta == 0.0f ? 0.0f : args.beta * c[column];
    }
  }
}

// The tiles of one product, each within `staging_bytes` (but for one of
// kGrain rows and columns, which may need more): all of b when it fits in
// half the staging (or is read in place), else column blocks of it that
// do; then as many rows of a, with their float32 c where c is bf16, as the
// rest holds.
void AddTiles(const GemmArgs& args, const OneDnnMatmul* matmul,
              int64_t staging_bytes, int64_t element_bytes,
              std::vector<Tile>* tiles) {
  const int64_t k_bytes = args.k * element_bytes;
  const int64_t b_column_bytes =
      BInPlace(args, matmul != nullptr) ? 0 : k_bytes;
  int64_t columns = args.n;
  if (columns * b_column_bytes > staging_bytes / 2) {
    columns = std::max<int64_t>(kGrain,
                                staging_bytes / 2 / k_bytes / kGrain * kGrain);
  }
  const int64_t row_bytes =
      (AInPlace(args, matmul != nullptr) ? 0 : k_bytes) +
      (args.c_bf16 == nullptr ? 0
                              : columns * static_cast<int64_t>(sizeof(float)));
  const int64_t rows =
      row_bytes == 0 ? args.m
                     : std::max<int64_t>(
                           kGrain, (staging_bytes - columns * b_column_bytes) /
                                       row_bytes / kGrain * kGrain);
  for (int64_t row = 0; row < args.m; row += rows) {
    for (int64_t column = 0; column < args.n; column += columns) {
      tiles->push_back({&args, matmul, row, std::min(args.m, row + rows),
                        column, std::min(args.n, column + columns)});
    }
  }
}

// Converts a round's blocks and runs its tiles.
void RunRound(ThreadPool& pool, absl::Span<const Conversion> conversions,
              absl::Span<const PlacedTile> round, bool with_onednn,
              char* scratch,
              const std::function<void(absl::Status)>& record_error) {
  for (const Conversion& conversion : conversions) {
    if (conversion.in_place) continue;
    // Rows [begin, end) of the block: bf16 bits for oneDNN, bf16-valued
    // float32s for OpenBLAS. A bf16 block is copied only for OpenBLAS
    // (oneDNN reads it in place), widened.
    const auto convert_rows = [&](int64_t begin, int64_t end) {
      const int64_t rows = end - begin, columns = conversion.columns;
      const int64_t to_offset = begin * columns;
      uint16_t* to_bits =
          reinterpret_cast<uint16_t*>(scratch + conversion.offset) + to_offset;
      float* to_values =
          reinterpret_cast<float*>(scratch + conversion.offset) + to_offset;
      if (conversion.from_bf16 != nullptr) {
        WidenBf16Matrix(rows, columns,
                        conversion.from_bf16 + begin * conversion.stride,
                        conversion.stride, to_values, columns);
        return;
      }
      const float* from = conversion.from + begin * conversion.stride;
      if (with_onednn) {
        ConvertMatrixToBf16(rows, columns, from, conversion.stride, to_bits,
                            columns);
      } else {
        RoundMatrixToBf16(rows, columns, from, conversion.stride, to_values,
                          columns);
      }
    };
    if (conversion.elements() < kSerialConversionElements) {
      convert_rows(0, conversion.rows);
    } else {
      pool.ParallelFor(conversion.rows, kGrain, convert_rows);
    }
  }

  // The pieces, cut and dealt to threads as GroupedGemm does float32 ones.
  std::vector<Piece> pieces;
  std::vector<int64_t> piece_work;
  for (const PlacedTile& placed : round) {
    const Tile& tile = *placed.tile;
    const int64_t work = tile.rows() * tile.columns() * tile.args->k;
    const int parts = tile.parts();
    for (int part = 0; part < parts; ++part) {
      const int64_t begin = PartBegin(tile.rows(), kGrain, parts, part);
      const int64_t end = PartBegin(tile.rows(), kGrain, parts, part + 1);
      if (begin == end) continue;
      pieces.push_back({&placed, begin, end});
      piece_work.push_back(work / tile.rows() * (end - begin));
    }
  }
  const int64_t element_bytes = with_onednn ? sizeof(uint16_t) : sizeof(float);
  RunPiecesByWork(pool, piece_work, [&](size_t i) {
    const Piece& piece = pieces[i];
    const PlacedTile& placed = *piece.placed;
    const Tile& tile = *placed.tile;
    const GemmArgs& args = *tile.args;
    const int64_t k = args.k;
    const int64_t rows = piece.end - piece.begin;
    // A block where it is, or its dense copy, and its row stride.
    const auto block = [&](const Conversion& conversion) {
      return conversion.in_place
                 ? std::make_pair(
                       reinterpret_cast<const char*>(conversion.from_bf16),
                       conversion.stride)
                 : std::make_pair(
                       static_cast<const char*>(scratch + conversion.offset),
                       conversion.columns);
    };
    // The piece's rows of a: from its row piece.begin, or its column when
    // stored transposed.
    const auto [a_block, lda] = block(conversions[placed.a]);
    const char* a =
        a_block +
        (args.transpose_a == Transpose::kNo ? piece.begin * lda : piece.begin) *
            element_bytes;
    const auto [b, ldb] = block(conversions[placed.b]);
    // c's rows of the piece: in c itself, or in the tile's float32 copy.
    const int64_t ldc = placed.c_offset < 0 ? args.ldc : tile.columns();
    float* c =
        placed.c_offset < 0
            ? args.c + (tile.row_begin + piece.begin) * ldc + tile.column_begin
            : reinterpret_cast<float*>(scratch + placed.c_offset) +
                  piece.begin * ldc;
    if (with_onednn) {
      UseOneOneDnnThread();
      const absl::Status run =
          tile.matmul->Run(rows, k, tile.columns(), a, lda, b, ldb, c, ldc);
      if (!run.ok()) record_error(run);
    } else {
      GemmArgs rounded = args;
      rounded.m = rows;
      rounded.n = tile.columns();
      rounded.a = reinterpret_cast<const float*>(a);
      rounded.lda = lda;
      rounded.b = reinterpret_cast<const float*>(b);
      rounded.ldb = ldb;
      rounded.c = c;
      rounded.ldc = ldc;
      BlasGemm(rounded);
    }
    if (args.c_bf16 != nullptr) {
      ConvertMatrixToBf16(rows, tile.columns(), c, ldc,
                          args.c_bf16 +
                              (tile.row_begin + piece.begin) * args.ldc +
                              tile.column_begin,
                          args.ldc);
    }
  });
}

}  // namespace

absl::StatusOr<void*> HeapScratchArena::Reserve(int64_t bytes) {
  if (static_cast<int64_t>(block_.size()) < bytes + kAlignmentBytes) {
    block_ = std::vector<char>(bytes + kAlignmentBytes);
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(block_.data());
  return block_.data() + (Aligned(address) - address);
}

absl::Status CpuOps::status() const {
  absl::MutexLock lock(&error_mutex_);
  return first_error_;
}

void CpuOps::RecordError(absl::Status error) {
  absl::MutexLock lock(&error_mutex_);
  if (first_error_.ok()) first_error_ = std::move(error);
}

void CpuOps::SetMatmulStagingBytes(int64_t bytes) {
  absl::MutexLock lock(&bf16_mutex_);
  staging_bytes_ = bytes;
}

std::string CpuOps::Bf16ProductsKernel() {
  const absl::StatusOr<std::unique_ptr<OneDnnMatmul>> made =
      OneDnnMatmul::Create(MatmulLayout{});
  return made.ok() ? absl::StrCat("oneDNN ", (*made)->implementation())
                   : "OpenBLAS on bf16-rounded values";
}

const OneDnnMatmul* CpuOps::Matmul(const MatmulLayout& layout) {
  absl::MutexLock lock(&matmuls_mutex_);
  std::unique_ptr<OneDnnMatmul>& matmul =
      matmuls_[std::make_tuple(layout.input, layout.a_transposed,
                               layout.b_transposed, layout.alpha, layout.beta)];
  if (matmul == nullptr) {
    // oneDNN may size a kernel's blocking by the creating thread's OpenMP
    // threads, which default to the machine's cores: the kernels are made, as
    // they are run, at one, so that another machine's core count changes
    // nothing.
    UseOneOneDnnThread();
    absl::StatusOr<std::unique_ptr<OneDnnMatmul>> made =
        OneDnnMatmul::Create(layout);
    // No kernel here: remembered as a null entry, and the caller goes to
    // OpenBLAS.
    if (made.ok()) matmul = *std::move(made);
  }
  return matmul.get();
}

void CpuOps::Bf16Products(absl::Span<const GemmArgs> problems) {
  absl::MutexLock lock(&bf16_mutex_);
  std::vector<const GemmArgs*> work;
  std::vector<const OneDnnMatmul*> matmuls;
  // Whether this call's copies are bf16 bits or bf16-rounded float32s.
  bool with_onednn = true;
  for (const GemmArgs& args : problems) {
    if (args.m == 0 || args.n == 0) continue;
    if (absl::Status output = CheckBf16Output(args); !output.ok()) {
      RecordError(std::move(output));
      continue;
    }
    if (args.k == 0) {
      ScaleRows(args);
      continue;
    }
    work.push_back(&args);
    MatmulLayout layout;
    layout.a_transposed = args.transpose_a == Transpose::kYes;
    layout.b_transposed = args.transpose_b == Transpose::kYes;
    layout.alpha = args.alpha;
    layout.beta = args.beta;
    matmuls.push_back(Matmul(layout));
    with_onednn = with_onednn && matmuls.back() != nullptr;
  }
  if (work.empty()) return;
  const int64_t element_bytes = with_onednn ? sizeof(uint16_t) : sizeof(float);
  std::vector<Tile> tiles;
  for (size_t i = 0; i < work.size(); ++i) {
    // Less the alignment of a tile's three copies.
    AddTiles(*work[i], with_onednn ? matmuls[i] : nullptr,
             staging_bytes_ - 3 * kAlignmentBytes, element_bytes, &tiles);
  }

  size_t next = 0;
  while (next < tiles.size()) {
    // This round: tiles in order while their blocks fit the staging (the
    // first always, taking more room if it needs it).
    std::vector<Conversion> conversions;
    std::vector<PlacedTile> round;
    int64_t used_bytes = 0;
    const auto add = [&](const Conversion& block, int64_t* bytes) {
      for (size_t i = 0; i < conversions.size(); ++i) {
        if (conversions[i].SameAs(block)) return i;
      }
      conversions.push_back(block);
      if (!block.in_place) {
        conversions.back().offset = used_bytes + *bytes;
        *bytes += Aligned(block.elements() * element_bytes);
      }
      return conversions.size() - 1;
    };
    while (next < tiles.size()) {
      const Tile& tile = tiles[next];
      const size_t conversions_before = conversions.size();
      int64_t bytes = 0;
      PlacedTile placed{&tile, add(tile.ABlock(), &bytes),
                        add(tile.BBlock(), &bytes)};
      if (tile.args->c_bf16 != nullptr) {
        placed.c_offset = used_bytes + bytes;
        bytes += Aligned(tile.rows() * tile.columns() *
                         static_cast<int64_t>(sizeof(float)));
      }
      if (!round.empty() && used_bytes + bytes > staging_bytes_) {
        conversions.resize(conversions_before);
        break;
      }
      used_bytes += bytes;
      round.push_back(placed);
      ++next;
    }
    absl::StatusOr<void*> reserved =
        scratch_->Reserve(std::max(used_bytes, staging_bytes_));
    if (!reserved.ok()) {
      RecordError(absl::Status(
          reserved.status().code(),
          absl::StrCat("bf16 matrix product: no room for its operands' bf16 "
                       "copies (",
                       std::max(used_bytes, staging_bytes_),
                       " bytes): ", reserved.status().message())));
      return;
    }
    RunRound(pool_, conversions, round, with_onednn,
             static_cast<char*>(*reserved),
             [this](absl::Status error) { RecordError(std::move(error)); });
  }
}

}  // namespace plateau::kernels::cpu
