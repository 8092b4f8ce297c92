// CpuOps' bf16 matrix products (GemmPrecision::kBf16). An operand given as
// bf16 (GemmArgs::a_bf16, b_bf16) is read where it is, in any layout and
// with any leading dimension; a float32 one is converted to a dense bf16
// copy in the scratch arena, within the staging bytes
// (SetMatmulStagingBytes), a tile at a time:
//   - each product is cut into tiles of whole rows of c and, only when a
//     float32 b is too large to stage whole, of column blocks; a tile's
//     blocks keep their operand's layout (the kernels take a and b either way
//     round, and a transposing copy of a cost a weight gradient's product a
//     fifth to a quarter of its time: docs/BENCHMARKS.md, "Weight gradients
//     without a transposing copy"): a's block is
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
// for this CPU, every block is packed instead, rounded to bf16 (bf16
// operands widened) but kept as float32, and the pieces run through our
// fixed-order kernel (fixed_order_gemm.h), which writes c, or c_bf16, in
// place: a row's bits are then the same whatever rows, tiles and staging it
// is made with, as they are through oneDNN.
#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fixed_order_gemm.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

// Pieces and tiles are whole multiples of this many rows (and columns).
constexpr int64_t kGrain = 16;
// Pieces are at least this many rows: oneDNN's bf16 products lose 5-10%
// here against 1024 rows and 11-16% at 64 (docs/BENCHMARKS.md, "The same
// bits at any thread count"), and the vocabulary's 256-token blocks are
// still shared by two threads. (Where oneDNN has no bf16 kernel, the
// fixed-order kernel loses nothing at 128 rows.)
constexpr int64_t kMinPieceRows = 128;
// Below this many elements a block is converted on the calling thread.
constexpr int64_t kSerialConversionElements = 1 << 15;
// Every copy in the scratch starts on a cache line.
constexpr int64_t kAlignmentBytes = 64;

int64_t Aligned(int64_t bytes) {
  return (bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes;
}

// A block of an operand: `count` rows of a (or columns of b) of length k,
// stored from `from` (float32) or `from_bf16` (row stride `stride`), as
// [count, k] or, transposed, [k, count] for a, and the other way round for
// b. It is converted into the scratch at `offset`, as a dense bf16 matrix
// for oneDNN or packed panels for the fixed-order kernel; or, in_place, a
// bf16 block is read where it is.
struct Conversion {
  // The block `offset` elements into the operand (float32 or bf16).
  static Conversion Of(const float* from, const uint16_t* from_bf16,
                       int64_t offset, bool of_a, bool transposed,
                       int64_t count, int64_t k, int64_t stride,
                       bool in_place) {
    return {from == nullptr ? nullptr : from + offset,
            from_bf16 == nullptr ? nullptr : from_bf16 + offset,
            of_a,
            transposed,
            count,
            k,
            stride,
            in_place};
  }

  const float* from;
  const uint16_t* from_bf16;
  bool of_a;
  bool transposed;
  int64_t count;
  int64_t k;
  int64_t stride;
  bool in_place;
  int64_t offset = 0;

  // As stored: a's rows, or b's columns, are its stored rows unless one of
  // them is transposed.
  int64_t stored_rows() const { return of_a != transposed ? count : k; }
  int64_t stored_columns() const { return of_a != transposed ? k : count; }
  // The scratch elements of its copy: 2-byte ones for oneDNN, else floats.
  int64_t elements(bool with_onednn) const {
    if (with_onednn) return count * k;
    return of_a ? PackedRowsElements(count, k)
                : PackedColumnsElements(count, k);
  }
  bool SameAs(const Conversion& other) const {
    return from == other.from && from_bf16 == other.from_bf16 &&
           of_a == other.of_a && transposed == other.transposed &&
           count == other.count && k == other.k && stride == other.stride;
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
    // a as [m, k] row-major; stored [k, m] when transposed, which the kernels
    // take as it is.
    const bool transposed = a.transpose_a == Transpose::kYes;
    return Conversion::Of(a.a, a.a_bf16,
                          transposed ? row_begin : row_begin * a.lda,
                          /*of_a=*/true, transposed, rows(), a.k, a.lda,
                          AInPlace(a, matmul != nullptr));
  }
  Conversion BBlock() const {
    const GemmArgs& a = *args;
    // b as stored: [k, n], or [n, k] when transposed.
    const bool transposed = a.transpose_b == Transpose::kYes;
    return Conversion::Of(a.b, a.b_bf16,
                          transposed ? column_begin * a.ldb : column_begin,
                          /*of_a=*/false, transposed, columns(), a.k, a.ldb,
                          BInPlace(a, matmul != nullptr));
  }
};

// A tile in a round: where its blocks and its float32 c are.
struct PlacedTile {
  const Tile* tile;
  size_t a;  // index into the round's conversions
  size_t b;
  // oneDNN's dense float32 tile of a c_bf16 product, or -1.
  int64_t c_offset = -1;
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
// do; then as many rows of a, with their float32 c where oneDNN makes a
// bf16 c, as the rest holds. `matmul` is null where the fixed-order kernel
// runs them.
void AddTiles(const GemmArgs& args, const OneDnnMatmul* matmul,
              int64_t staging_bytes, std::vector<Tile>* tiles) {
  const bool with_onednn = matmul != nullptr;
  // The scratch bytes of a's block of `rows` rows, b's of `columns`
  // columns, and the float32 copy of a bf16 c's tile.
  const auto a_bytes = [&](int64_t rows) -> int64_t {
    if (AInPlace(args, with_onednn)) return 0;
    return with_onednn
               ? rows * args.k * int64_t{sizeof(uint16_t)}
               : PackedRowsElements(rows, args.k) * int64_t{sizeof(float)};
  };
  const auto b_bytes = [&](int64_t columns) -> int64_t {
    if (BInPlace(args, with_onednn)) return 0;
    return with_onednn ? columns * args.k * int64_t{sizeof(uint16_t)}
                       : PackedColumnsElements(columns, args.k) *
                             int64_t{sizeof(float)};
  };
  const auto c_bytes = [&](int64_t rows, int64_t columns) -> int64_t {
    return with_onednn && args.c_bf16 != nullptr
               ? rows * columns * int64_t{sizeof(float)}
               : 0;
  };
  // The most grains of `extent` (at least one) whose bytes fit `budget`.
  const auto most_that_fit = [](int64_t extent, int64_t budget,
                                const auto& bytes) {
    if (bytes(extent) <= budget) return extent;
    const int64_t per_grain = std::max<int64_t>(bytes(kGrain), 1);
    int64_t count = std::max<int64_t>(kGrain, budget / per_grain * kGrain);
    while (count > kGrain && bytes(count) > budget) count -= kGrain;
    return std::min(count, extent);
  };
  const int64_t columns = most_that_fit(args.n, staging_bytes / 2, b_bytes);
  const int64_t rows = most_that_fit(
      args.m, staging_bytes - b_bytes(columns),
      [&](int64_t r) { return a_bytes(r) + c_bytes(r, columns); });
  for (int64_t row = 0; row < args.m; row += rows) {
    for (int64_t column = 0; column < args.n; column += columns) {
      tiles->push_back({&args, matmul, row, std::min(args.m, row + rows),
                        column, std::min(args.n, column + columns)});
    }
  }
}

// The fixed-order kernel's panels of a block, and panels [begin, end) of
// them packed into the scratch.
int64_t PanelsOf(const Conversion& conversion) {
  const int64_t panel = conversion.of_a ? kPanelRows : kPanelColumns;
  return (conversion.count + panel - 1) / panel;
}
void PackPanels(const Conversion& conversion, char* scratch, int64_t begin,
                int64_t end) {
  float* to = reinterpret_cast<float*>(scratch + conversion.offset);
  const StoredMatrix from{conversion.from, conversion.from_bf16,
                          conversion.stride};
  if (conversion.of_a) {
    PackRows(from, conversion.transposed, conversion.count, conversion.k, begin,
             end, to);
  } else {
    PackColumns(from, conversion.transposed, conversion.count, conversion.k,
                begin, end, to);
  }
}

// A round's copy of a block: dense bf16 bits for oneDNN, or the
// fixed-order kernel's packed panels of bf16-rounded floats.
void ConvertBlock(ThreadPool& pool, const Conversion& conversion,
                  bool with_onednn, char* scratch) {
  if (with_onednn) {
    // Only float32 blocks are copied: oneDNN reads bf16 ones in place.
    uint16_t* to = reinterpret_cast<uint16_t*>(scratch + conversion.offset);
    const int64_t columns = conversion.stored_columns();
    const auto convert_rows = [&](int64_t begin, int64_t end) {
      ConvertMatrixToBf16(end - begin, columns,
                          conversion.from + begin * conversion.stride,
                          conversion.stride, to + begin * columns, columns);
    };
    if (conversion.elements(with_onednn) < kSerialConversionElements) {
      convert_rows(0, conversion.stored_rows());
    } else {
      pool.ParallelFor(conversion.stored_rows(), kGrain, convert_rows);
    }
    return;
  }
  const int64_t panels = PanelsOf(conversion);
  if (conversion.elements(with_onednn) < kSerialConversionElements) {
    PackPanels(conversion, scratch, 0, panels);
  } else {
    pool.ParallelFor(panels, 1, [&](int64_t begin, int64_t end) {
      PackPanels(conversion, scratch, begin, end);
    });
  }
}

// Converts a round's blocks and runs its tiles. For the fixed-order
// kernel, a block one tile alone reads is packed by its pieces as they
// start, each its own rows of a (or the one piece all of b): no pass over
// the pool between the copies and the products, and the panels still in
// cache when the kernel reads them.
void RunRound(ThreadPool& pool, absl::Span<const Conversion> conversions,
              absl::Span<const PlacedTile> round, bool with_onednn,
              char* scratch,
              const std::function<void(absl::Status)>& record_error) {
  // The pieces, cut and dealt to threads as GroupedGemm does float32 ones.
  std::vector<Piece> pieces;
  std::vector<int64_t> piece_work;
  // Per conversion: the tiles and the pieces that read it.
  std::vector<int> tiles_reading(conversions.size(), 0);
  std::vector<int> pieces_reading(conversions.size(), 0);
  for (const PlacedTile& placed : round) {
    const Tile& tile = *placed.tile;
    const int64_t work = tile.rows() * tile.columns() * tile.args->k;
    const int parts = tile.parts();
    ++tiles_reading[placed.a];
    ++tiles_reading[placed.b];
    for (int part = 0; part < parts; ++part) {
      const int64_t begin = PartBegin(tile.rows(), kGrain, parts, part);
      const int64_t end = PartBegin(tile.rows(), kGrain, parts, part + 1);
      if (begin == end) continue;
      pieces.push_back({&placed, begin, end});
      piece_work.push_back(work / tile.rows() * (end - begin));
      ++pieces_reading[placed.a];
      ++pieces_reading[placed.b];
    }
  }
  std::vector<bool> packed_by_pieces(conversions.size(), false);
  for (size_t i = 0; i < conversions.size(); ++i) {
    const Conversion& conversion = conversions[i];
    if (conversion.in_place) continue;
    packed_by_pieces[i] =
        !with_onednn &&
        (conversion.of_a ? tiles_reading[i] == 1 : pieces_reading[i] == 1);
    if (!packed_by_pieces[i]) {
      ConvertBlock(pool, conversion, with_onednn, scratch);
    }
  }
  RunPiecesByWork(pool, piece_work, [&](size_t i) {
    const Piece& piece = pieces[i];
    const PlacedTile& placed = *piece.placed;
    const Tile& tile = *placed.tile;
    const GemmArgs& args = *tile.args;
    const int64_t k = args.k;
    const int64_t rows = piece.end - piece.begin;
    const Conversion& a_block = conversions[placed.a];
    const Conversion& b_block = conversions[placed.b];
    // c's first element of the piece, of a float32 c or a bf16 one.
    const int64_t c_at =
        (tile.row_begin + piece.begin) * args.ldc + tile.column_begin;
    if (!with_onednn) {
      // The piece's rows begin a panel: pieces are whole grains.
      static_assert(kGrain % kPanelRows == 0);
      if (packed_by_pieces[placed.a]) {
        PackPanels(a_block, scratch, piece.begin / kPanelRows,
                   (piece.end + kPanelRows - 1) / kPanelRows);
      }
      if (packed_by_pieces[placed.b]) {
        PackPanels(b_block, scratch, 0, PanelsOf(b_block));
      }
      const float* packed_a =
          reinterpret_cast<const float*>(scratch + a_block.offset) +
          piece.begin * k;
      FixedOrderProduct(
          rows, tile.columns(), k, packed_a,
          reinterpret_cast<const float*>(scratch + b_block.offset), args.alpha,
          args.beta, args.c == nullptr ? nullptr : args.c + c_at,
          args.c_bf16 == nullptr ? nullptr : args.c_bf16 + c_at, args.ldc);
      return;
    }
    // A block where it is, or its dense copy, and its row stride.
    const auto block = [&](const Conversion& conversion) {
      return conversion.in_place
                 ? std::make_pair(conversion.from_bf16, conversion.stride)
                 : std::make_pair(reinterpret_cast<const uint16_t*>(
                                      scratch + conversion.offset),
                                  conversion.stored_columns());
    };
    // The piece's rows of a: from its row piece.begin, or its column when
    // stored transposed.
    const auto [a_start, lda] = block(a_block);
    const uint16_t* a =
        a_start +
        (args.transpose_a == Transpose::kNo ? piece.begin * lda : piece.begin);
    const auto [b, ldb] = block(b_block);
    // c's rows of the piece: in c itself, or in the tile's float32 copy.
    const int64_t ldc = placed.c_offset < 0 ? args.ldc : tile.columns();
    float* c = placed.c_offset < 0
                   ? args.c + c_at
                   : reinterpret_cast<float*>(scratch + placed.c_offset) +
                         piece.begin * ldc;
    UseOneOneDnnThread();
    const absl::Status run =
        tile.matmul->Run(rows, k, tile.columns(), a, lda, b, ldb, c, ldc);
    if (!run.ok()) record_error(run);
    if (args.c_bf16 != nullptr) {
      ConvertMatrixToBf16(rows, tile.columns(), c, ldc, args.c_bf16 + c_at,
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
  return made.ok()
             ? absl::StrCat("oneDNN ", (*made)->implementation())
             : absl::StrCat(
                   "fixed-order ",
                   DetectedSimdLevel() >= SimdLevel::kAvx2 ? "avx2" : "scalar");
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
    // the fixed-order kernel.
    if (made.ok()) matmul = *std::move(made);
  }
  return matmul.get();
}

void CpuOps::Bf16Products(absl::Span<const GemmArgs> problems) {
  absl::MutexLock lock(&bf16_mutex_);
  std::vector<const GemmArgs*> work;
  std::vector<const OneDnnMatmul*> matmuls;
  // Whether this call's products run through oneDNN (its copies are bf16
  // bits) or the fixed-order kernel (packed bf16-rounded floats).
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
             staging_bytes_ - 3 * kAlignmentBytes, &tiles);
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
        *bytes += Aligned(block.elements(with_onednn) * element_bytes);
      }
      return conversions.size() - 1;
    };
    while (next < tiles.size()) {
      const Tile& tile = tiles[next];
      const size_t conversions_before = conversions.size();
      int64_t bytes = 0;
      PlacedTile placed{&tile, add(tile.ABlock(), &bytes),
                        add(tile.BBlock(), &bytes)};
      if (with_onednn && tile.args->c_bf16 != nullptr) {
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
