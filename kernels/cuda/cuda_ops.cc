#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

// Offsets of the pieces of one scratch reservation, each 256-byte aligned
// (cudaMalloc's own alignment, enough for any kernel's loads).
class ScratchLayout {
 public:
  template <typename T>
  int64_t Add(int64_t count) {
    const int64_t offset = (bytes_ + 255) / 256 * 256;
    bytes_ = offset + count * static_cast<int64_t>(sizeof(T));
    return offset;
  }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_ = 0;
};

cublasOperation_t BlasOperation(Transpose transpose) {
  return transpose == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

bool FitsInt(int64_t value) {
  return value >= 0 && value <= std::numeric_limits<int>::max();
}

bool Aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

bool GemmFitsInt(const GemmArgs& args) {
  return FitsInt(args.m) && FitsInt(args.n) && FitsInt(args.k) &&
         FitsInt(args.lda) && FitsInt(args.ldb) && FitsInt(args.ldc);
}

template <typename T>
T* At(char* base, int64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaOps>> CudaOps::Create(
    const CudaOpsOptions& options) {
  if (options.scratch == nullptr) {
    return absl::InvalidArgumentError("CudaOps needs a scratch arena");
  }
  absl::StatusOr<CudaDeviceInfo> device = FindCudaDevice(options.device);
  if (!device.ok()) return device.status();
  absl::Status status =
      CudaStatus(cudaSetDevice(options.device), "cudaSetDevice");
  if (!status.ok()) return status;
  absl::StatusOr<const CublasLibrary*> cublas = LoadCublas();
  if (!cublas.ok()) return cublas.status();
  cublasHandle_t blas = nullptr;
  const cublasStatus_t created = (*cublas)->create(&blas);
  if (created != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasCreate failed: ",
                                            (*cublas)->status_string(created)));
  }
  std::unique_ptr<CudaOps> ops(new CudaOps(options, *cublas, blas));
  if (!ops->CheckBlas(ops->cublas_.set_stream(blas, ops->compute_stream_),
                      "cublasSetStream")) {
    return ops->status();
  }
  return ops;
}

CudaOps::CudaOps(const CudaOpsOptions& options, const CublasLibrary* cublas,
                 cublasHandle_t blas)
    : device_(options.device),
      matmul_precision_(options.matmul_precision),
      scratch_(options.scratch),
      cublas_(*cublas),
      blas_(blas) {}

CudaOps::~CudaOps() {
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  absl::MutexLock lock(&lanes_mutex_);
  for (const std::unique_ptr<CopyLane>& lane : lanes_) {
    cudaEventDestroy(lane->kernels_done);
    cudaStreamDestroy(lane->stream);
  }
  cublas_.destroy(blas_);
}

absl::Status CudaOps::status() const {
  absl::MutexLock lock(&error_mutex_);
  return first_error_;
}

absl::Status CudaOps::Synchronize() {
  if (!failed()) Check(cudaStreamSynchronize(compute_stream_), "synchronize");
  return status();
}

void CudaOps::Fail(absl::Status status) {
  absl::MutexLock lock(&error_mutex_);
  if (first_error_.ok()) {
    first_error_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }
}

bool CudaOps::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  Fail(absl::InternalError(absl::StrCat("CUDA device ", device_, ": ", what,
                                        " failed: ", cudaGetErrorName(error),
                                        " (", cudaGetErrorString(error), ")")));
  return false;
}

bool CudaOps::CheckBlas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  Fail(absl::InternalError(
      absl::StrCat("CUDA device ", device_, ": ", what,
                   " failed: ", cublas_.status_string(status))));
  return false;
}

char* CudaOps::Scratch(int64_t bytes, const char* what) {
  absl::StatusOr<void*> reserved =
      scratch_->Reserve(std::max<int64_t>(bytes, 1));
  if (!reserved.ok()) {
    Fail(absl::Status(
        reserved.status().code(),
        absl::StrCat("scratch for ", what, ": ", reserved.status().message())));
    return nullptr;
  }
  return static_cast<char*>(*reserved);
}

bool CudaOps::Upload(const void* host, int64_t bytes, void* device,
                     const char* what) {
  if (bytes == 0) return true;
  return Check(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes),
                               cudaMemcpyHostToDevice, compute_stream_),
               what);
}

bool CudaOps::Download(const void* device, int64_t bytes, void* host,
                       const char* what) {
  return Check(cudaMemcpyAsync(host, device, static_cast<size_t>(bytes),
                               cudaMemcpyDeviceToHost, compute_stream_),
               what) &&
         Check(cudaStreamSynchronize(compute_stream_), what);
}

// ---- Matrix products ----

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
// operands swap, each keeping its transpose flag.
void CudaOps::Gemm(const GemmArgs& args) {
  if (failed() || args.m == 0 || args.n == 0) return;
  if (!GemmFitsInt(args)) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "CUDA Gemm: a size or leading dimension exceeds 2^31 - 1 (m ", args.m,
        ", n ", args.n, ", k ", args.k, ")")));
    return;
  }
  const cublasComputeType_t compute =
      matmul_precision_ == MatmulPrecision::kFloat32
          ? CUBLAS_COMPUTE_32F
          : CUBLAS_COMPUTE_32F_FAST_TF32;
  CheckBlas(
      cublas_.gemm(blas_, BlasOperation(args.transpose_b),
                   BlasOperation(args.transpose_a), static_cast<int>(args.n),
                   static_cast<int>(args.m), static_cast<int>(args.k),
                   &args.alpha, args.b, CUDA_R_32F, static_cast<int>(args.ldb),
                   args.a, CUDA_R_32F, static_cast<int>(args.lda), &args.beta,
                   args.c, CUDA_R_32F, static_cast<int>(args.ldc), compute,
                   CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

// One group per product (their shapes differ, expert by expert); the
// pointer arrays go to scratch, the rest stays on the host.
void CudaOps::GroupedGemm(absl::Span<const GemmArgs> problems) {
  if (failed()) return;
  std::vector<GemmArgs> work;
  for (const GemmArgs& args : problems) {
    if (args.m == 0 || args.n == 0) continue;
    if (!GemmFitsInt(args)) return Gemm(args);  // records the error
    work.push_back(args);
  }
  if (work.empty()) return;
  if (work.size() == 1) return Gemm(work[0]);
  const int count = static_cast<int>(work.size());
  std::vector<cublasOperation_t> transa(count), transb(count);
  std::vector<int> m(count), n(count), k(count), lda(count), ldb(count),
      ldc(count), group_size(count, 1);
  std::vector<float> alpha(count), beta(count);
  std::vector<const void*> a(count), b(count);
  std::vector<void*> c(count);
  for (int i = 0; i < count; ++i) {
    const GemmArgs& args = work[i];
    transa[i] = BlasOperation(args.transpose_b);
    transb[i] = BlasOperation(args.transpose_a);
    m[i] = static_cast<int>(args.n);
    n[i] = static_cast<int>(args.m);
    k[i] = static_cast<int>(args.k);
    a[i] = args.b;
    lda[i] = static_cast<int>(args.ldb);
    b[i] = args.a;
    ldb[i] = static_cast<int>(args.lda);
    c[i] = args.c;
    ldc[i] = static_cast<int>(args.ldc);
    alpha[i] = args.alpha;
    beta[i] = args.beta;
  }
  const int64_t pointer_bytes = count * static_cast<int64_t>(sizeof(void*));
  const std::vector<char*> places = UploadAll({{a.data(), pointer_bytes},
                                               {b.data(), pointer_bytes},
                                               {c.data(), pointer_bytes}},
                                              0, "GroupedGemm");
  if (places.empty()) return;
  // cuBLAS's grouped products take float32 inputs exactly or as tf32; its
  // tensor-core kernels want 16-byte aligned matrices (an expert's rows
  // start anywhere), so a misaligned group runs exactly.
  bool aligned = true;
  for (const GemmArgs& args : work) {
    aligned =
        aligned && Aligned16(args.a) && Aligned16(args.b) && Aligned16(args.c);
  }
  const cublasComputeType_t compute =
      matmul_precision_ == MatmulPrecision::kFloat32 || !aligned
          ? CUBLAS_COMPUTE_32F
          : CUBLAS_COMPUTE_32F_FAST_TF32;
  CheckBlas(
      cublas_.grouped_gemm(
          blas_, transa.data(), transb.data(), m.data(), n.data(), k.data(),
          alpha.data(), At<const void* const>(places[0], 0), CUDA_R_32F,
          lda.data(), At<const void* const>(places[1], 0), CUDA_R_32F,
          ldb.data(), beta.data(), At<void* const>(places[2], 0), CUDA_R_32F,
          ldc.data(), count, group_size.data(), compute),
      "cublasGemmGroupedBatchedEx");
}

// ---- Copies ----

CudaOps::CopyLane* CudaOps::TakeLane() {
  {
    absl::MutexLock lock(&lanes_mutex_);
    if (!free_lanes_.empty()) {
      CopyLane* lane = free_lanes_.back();
      free_lanes_.pop_back();
      return lane;
    }
  }
  auto lane = std::make_unique<CopyLane>();
  if (!Check(cudaSetDevice(device_), "cudaSetDevice") ||
      !Check(cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags") ||
      !Check(
          cudaEventCreateWithFlags(&lane->kernels_done, cudaEventDisableTiming),
          "cudaEventCreateWithFlags")) {
    return nullptr;
  }
  absl::MutexLock lock(&lanes_mutex_);
  lanes_.push_back(std::move(lane));
  return lanes_.back().get();
}

void CudaOps::ReturnLane(CopyLane* lane) {
  absl::MutexLock lock(&lanes_mutex_);
  free_lanes_.push_back(lane);
}

void CudaOps::CopyOnLane(int64_t bytes, const void* source, void* destination,
                         cudaMemcpyKind kind) {
  if (failed()) {
    if (kind == cudaMemcpyDeviceToHost) std::memset(destination, 0, bytes);
    return;
  }
  if (bytes == 0) return;
  CopyLane* lane = TakeLane();
  if (lane == nullptr) return;
  // The lane waits for every kernel queued so far: the bytes read are
  // written, and the bytes overwritten no longer read, by them.
  const bool copied =
      Check(cudaSetDevice(device_), "cudaSetDevice") &&
      Check(cudaEventRecord(lane->kernels_done, compute_stream_),
            "cudaEventRecord") &&
      Check(cudaStreamWaitEvent(lane->stream, lane->kernels_done, 0),
            "cudaStreamWaitEvent") &&
      Check(
          cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes), kind,
                          lane->stream),
          kind == cudaMemcpyDeviceToHost ? "copy to host" : "copy from host") &&
      Check(cudaStreamSynchronize(lane->stream), "copy synchronize");
  ReturnLane(lane);
  if (!copied && kind == cudaMemcpyDeviceToHost) {
    std::memset(destination, 0, bytes);
  }
}

void CudaOps::CopyFromHost(int64_t bytes, const void* host, void* device) {
  CopyOnLane(bytes, host, device, cudaMemcpyHostToDevice);
}

void CudaOps::CopyToHost(int64_t bytes, const void* device, void* host) {
  CopyOnLane(bytes, device, host, cudaMemcpyDeviceToHost);
}

// ---- Elementwise and reductions ----

void CudaOps::Fill(int64_t count, float value, float* x) {
  if (!failed()) Check(LaunchFill(count, value, x, compute_stream_), "Fill");
}

void CudaOps::Copy(int64_t count, const float* source, float* destination) {
  if (failed() || count == 0) return;
  Check(cudaMemcpyAsync(destination, source,
                        static_cast<size_t>(count) * sizeof(float),
                        cudaMemcpyDeviceToDevice, compute_stream_),
        "Copy");
}

void CudaOps::Add(int64_t count, const float* a, const float* b, float* out) {
  if (!failed()) Check(LaunchAdd(count, a, b, out, compute_stream_), "Add");
}

void CudaOps::Scale(int64_t count, float factor, float* x) {
  if (!failed()) Check(LaunchScale(count, factor, x, compute_stream_), "Scale");
}

double CudaOps::ReduceSum(int64_t count, const float* x, bool squares,
                          const char* what) {
  if (failed()) return 0.0;
  ScratchLayout layout;
  const int64_t partials = layout.Add<double>(ReductionBlocks(count));
  const int64_t result = layout.Add<double>(1);
  char* scratch = Scratch(layout.bytes(), what);
  double sum = 0.0;
  if (scratch == nullptr ||
      !Check(LaunchSum(count, x, squares, At<double>(scratch, partials),
                       At<double>(scratch, result), compute_stream_),
             what) ||
      !Download(scratch + result, sizeof(double), &sum, what)) {
    return 0.0;
  }
  return sum;
}

double CudaOps::SumOfSquares(int64_t count, const float* x) {
  return ReduceSum(count, x, /*squares=*/true, "SumOfSquares");
}

double CudaOps::Sum(int64_t count, const float* x) {
  return ReduceSum(count, x, /*squares=*/false, "Sum");
}

void CudaOps::ColumnSums(int64_t rows, int64_t columns, const float* x,
                         absl::Span<double> column_sums) {
  std::fill(column_sums.begin(), column_sums.end(), 0.0);
  if (failed() || columns == 0) return;
  ScratchLayout layout;
  const int64_t partials = layout.Add<double>(RowPartsOf(rows).parts * columns);
  const int64_t sums = layout.Add<double>(columns);
  char* scratch = Scratch(layout.bytes(), "ColumnSums");
  if (scratch == nullptr ||
      !Check(LaunchColumnSums(rows, columns, x, At<double>(scratch, partials),
                              At<double>(scratch, sums), compute_stream_),
             "ColumnSums") ||
      !Download(scratch + sums, columns * int64_t{sizeof(double)},
                column_sums.data(), "ColumnSums")) {
    std::fill(column_sums.begin(), column_sums.end(), 0.0);
  }
}

// ---- Embedding, normalization, rotary ----

void CudaOps::EmbeddingForward(int64_t tokens, int64_t dim, const int32_t* ids,
                               const float* table, float* out) {
  if (failed()) return;
  Check(LaunchEmbeddingForward(tokens, dim, ids, table, out, compute_stream_),
        "EmbeddingForward");
}

void CudaOps::EmbeddingBackward(int64_t tokens, int64_t dim, const int32_t* ids,
                                const float* dout, float* dtable) {
  if (failed() || tokens == 0) return;
  char* scratch = Scratch(SortScratchInts(tokens) * int64_t{sizeof(int32_t)},
                          "EmbeddingBackward");
  if (scratch == nullptr) return;
  Check(LaunchEmbeddingBackward(tokens, dim, ids, dout, dtable,
                                At<int32_t>(scratch, 0), compute_stream_),
        "EmbeddingBackward");
}

void CudaOps::RmsNormForward(int64_t rows, int64_t dim, const float* x,
                             const float* weight, float epsilon, float* out,
                             float* inverse_rms) {
  if (failed()) return;
  Check(LaunchRmsNormForward(rows, dim, x, weight, epsilon, out, inverse_rms,
                             compute_stream_),
        "RmsNormForward");
}

void CudaOps::RmsNormBackward(int64_t rows, int64_t dim, const float* x,
                              const float* weight, const float* inverse_rms,
                              const float* dout, float* dx, float* dweight) {
  if (failed() || rows == 0) return;
  char* scratch = Scratch(RowPartsOf(rows).parts * dim * int64_t{sizeof(float)},
                          "RmsNormBackward");
  if (scratch == nullptr) return;
  Check(LaunchRmsNormBackward(rows, dim, x, weight, inverse_rms, dout, dx,
                              dweight, At<float>(scratch, 0), compute_stream_),
        "RmsNormBackward");
}

void CudaOps::RotaryForward(int64_t rows, int64_t seq_len, int64_t heads,
                            int64_t head_dim, int64_t row_stride, float* x) {
  if (failed()) return;
  Check(LaunchRotary(rows, seq_len, heads, head_dim, row_stride, 1.0f, x,
                     compute_stream_),
        "RotaryForward");
}

void CudaOps::RotaryBackward(int64_t rows, int64_t seq_len, int64_t heads,
                             int64_t head_dim, int64_t row_stride, float* dx) {
  if (failed()) return;
  Check(LaunchRotary(rows, seq_len, heads, head_dim, row_stride, -1.0f, dx,
                     compute_stream_),
        "RotaryBackward");
}

// ---- Attention ----

namespace {

// Attention's grid has the heads in y and the sequences in z, which hold at
// most 65535 blocks: longer batches go in slices of sequences, whose rows
// and logsumexp entries are consecutive.
constexpr int64_t kMaxGridYZBlocks = 65535;

}  // namespace

bool CudaOps::CheckAttentionShape(const AttentionShape& shape) {
  if (shape.head_dim <= kMaxAttentionHeadDim &&
      shape.heads <= kMaxGridYZBlocks) {
    return true;
  }
  Fail(absl::InvalidArgumentError(absl::StrCat(
      "CUDA attention supports head_dim up to ", kMaxAttentionHeadDim,
      " and up to ", kMaxGridYZBlocks, " heads, not head_dim ", shape.head_dim,
      " with ", shape.heads, " heads")));
  return false;
}

void CudaOps::AttentionForward(const AttentionShape& shape, const float* q,
                               const float* k, const float* v,
                               int64_t qkv_stride, float* out,
                               int64_t out_stride, float* logsumexp) {
  if (failed() || !CheckAttentionShape(shape)) return;
  for (int64_t first = 0; first < shape.batch; first += kMaxGridYZBlocks) {
    AttentionDims dims{std::min(kMaxGridYZBlocks, shape.batch - first),
                       shape.seq_len, shape.heads, shape.head_dim};
    const int64_t row = first * shape.seq_len;
    if (!Check(LaunchAttentionForward(
                   dims, q + row * qkv_stride, k + row * qkv_stride,
                   v + row * qkv_stride, qkv_stride, out + row * out_stride,
                   out_stride, logsumexp + first * shape.heads * shape.seq_len,
                   compute_stream_),
               "AttentionForward")) {
      return;
    }
  }
}

void CudaOps::AttentionBackward(const AttentionShape& shape, const float* q,
                                const float* k, const float* v,
                                int64_t qkv_stride, const float* out,
                                const float* dout, int64_t out_stride,
                                const float* logsumexp, float* dq, float* dk,
                                float* dv) {
  if (failed() || !CheckAttentionShape(shape)) return;
  const int64_t sequences = std::min(kMaxGridYZBlocks, shape.batch);
  char* scratch =
      Scratch(sequences * shape.heads * shape.seq_len * int64_t{sizeof(float)},
              "AttentionBackward");
  if (scratch == nullptr) return;
  for (int64_t first = 0; first < shape.batch; first += kMaxGridYZBlocks) {
    AttentionDims dims{std::min(kMaxGridYZBlocks, shape.batch - first),
                       shape.seq_len, shape.heads, shape.head_dim};
    const int64_t row = first * shape.seq_len;
    const int64_t qkv = row * qkv_stride;
    const int64_t outputs = row * out_stride;
    if (!Check(LaunchAttentionBackward(
                   dims, q + qkv, k + qkv, v + qkv, qkv_stride, out + outputs,
                   dout + outputs, out_stride,
                   logsumexp + first * shape.heads * shape.seq_len, dq + qkv,
                   dk + qkv, dv + qkv, At<float>(scratch, 0), compute_stream_),
               "AttentionBackward")) {
      return;
    }
  }
}

// ---- Mixture of experts ----

void CudaOps::SwiGluForward(int64_t count, const float* gate, const float* up,
                            float* out) {
  if (failed()) return;
  Check(LaunchSwiGluForward(count, gate, up, out, compute_stream_),
        "SwiGluForward");
}

void CudaOps::SwiGluBackward(int64_t count, const float* gate, const float* up,
                             const float* dout, float* dgate, float* dup) {
  if (failed()) return;
  Check(
      LaunchSwiGluBackward(count, gate, up, dout, dgate, dup, compute_stream_),
      "SwiGluBackward");
}

void CudaOps::RouterForward(int64_t tokens, int64_t experts, int64_t top_k,
                            const float* logits, float* probs,
                            int32_t* expert_index, float* gates) {
  if (failed()) return;
  Check(LaunchRouterForward(tokens, experts, top_k, logits, probs, expert_index,
                            gates, compute_stream_),
        "RouterForward");
}

void CudaOps::RouterBackward(int64_t tokens, int64_t experts, int64_t top_k,
                             const float* probs, const int32_t* expert_index,
                             const float* gates, const float* dgates,
                             absl::Span<const float> dprobs_per_expert,
                             float* dlogits) {
  if (failed() || tokens == 0) return;
  float* per_expert = nullptr;
  if (!dprobs_per_expert.empty()) {
    const std::vector<char*> places = UploadAll(
        {{dprobs_per_expert.data(),
          static_cast<int64_t>(dprobs_per_expert.size() * sizeof(float))}},
        0, "RouterBackward");
    if (places.empty()) return;
    per_expert = At<float>(places[0], 0);
  }
  Check(LaunchRouterBackward(tokens, experts, top_k, probs, expert_index, gates,
                             dgates, per_expert, dlogits, compute_stream_),
        "RouterBackward");
}

void CudaOps::ComputeExpertLayout(int64_t tokens, int64_t experts,
                                  int64_t top_k, const int32_t* expert_index,
                                  int32_t* assignment_row, int32_t* row_token,
                                  absl::Span<int64_t> expert_offsets) {
  std::fill(expert_offsets.begin(), expert_offsets.end(), 0);
  if (failed()) return;
  const int64_t assignments = tokens * top_k;
  ScratchLayout layout;
  const int64_t sort = layout.Add<int32_t>(SortScratchInts(assignments));
  const int64_t offsets = layout.Add<int64_t>(experts + 1);
  char* scratch = Scratch(layout.bytes(), "ComputeExpertLayout");
  if (scratch == nullptr) return;
  SortedItems sorted;
  if (assignments > 0 &&
      !Check(LaunchStableSortByKey(assignments, expert_index, KeyBits(experts),
                                   At<int32_t>(scratch, sort), &sorted,
                                   compute_stream_),
             "ComputeExpertLayout")) {
    return;
  }
  if (!Check(LaunchExpertLayout(assignments, experts, top_k, sorted,
                                assignment_row, row_token,
                                At<int64_t>(scratch, offsets), compute_stream_),
             "ComputeExpertLayout") ||
      !Download(scratch + offsets, (experts + 1) * int64_t{sizeof(int64_t)},
                expert_offsets.data(), "ComputeExpertLayout")) {
    std::fill(expert_offsets.begin(), expert_offsets.end(), 0);
  }
}

void CudaOps::GatherRows(int64_t rows, int64_t dim, const float* x,
                         const int32_t* row_token, float* out) {
  if (failed()) return;
  Check(LaunchGatherRows(rows, dim, x, row_token, out, compute_stream_),
        "GatherRows");
}

void CudaOps::GatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                 const float* drows,
                                 const int32_t* assignment_row, float* dx) {
  if (failed()) return;
  Check(LaunchGatherRowsBackward(tokens, top_k, dim, drows, assignment_row, dx,
                                 compute_stream_),
        "GatherRowsBackward");
}

void CudaOps::CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                          const float* rows, const int32_t* assignment_row,
                          const float* gates, const float* residual,
                          float* out) {
  if (failed()) return;
  Check(LaunchCombineRows(tokens, top_k, dim, rows, assignment_row, gates,
                          residual, out, compute_stream_),
        "CombineRows");
}

void CudaOps::CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                  const float* rows,
                                  const int32_t* assignment_row,
                                  const float* gates, const float* dout,
                                  float* drows, float* dgates) {
  if (failed()) return;
  Check(LaunchCombineRowsBackward(tokens, top_k, dim, rows, assignment_row,
                                  gates, dout, drows, dgates, compute_stream_),
        "CombineRowsBackward");
}

// ---- Cross-entropy ----

void CudaOps::CrossEntropyForward(int64_t tokens, int64_t vocab,
                                  const float* logits, const int32_t* targets,
                                  float* losses, float* logsumexp) {
  if (failed()) return;
  Check(LaunchCrossEntropyForward(tokens, vocab, logits, targets, losses,
                                  logsumexp, compute_stream_),
        "CrossEntropyForward");
}

void CudaOps::CrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                    int64_t vocab_begin, const float* logits,
                                    const int32_t* targets, float* logsumexp,
                                    float* target_logits) {
  if (failed()) return;
  Check(LaunchCrossEntropyFoldBlock(tokens, block, vocab_begin, logits, targets,
                                    logsumexp, target_logits, compute_stream_),
        "CrossEntropyFoldBlock");
}

void CudaOps::CrossEntropyBackward(int64_t tokens, int64_t block,
                                   int64_t vocab_begin, const int32_t* targets,
                                   const float* logsumexp, float scale,
                                   float* logits) {
  if (failed()) return;
  Check(LaunchCrossEntropyBackward(tokens, block, vocab_begin, targets,
                                   logsumexp, scale, logits, compute_stream_),
        "CrossEntropyBackward");
}

// ---- Optimizer ----

void CudaOps::AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                          float* params, const float* grads,
                          float* first_moment, float* second_moment) {
  if (failed()) return;
  Check(LaunchAdamWUpdate(coefficients, count, params, grads, first_moment,
                          second_moment, compute_stream_),
        "AdamWUpdate");
}

void CudaOps::SquareRoots(int64_t count, float scale, const float* x,
                          float* out) {
  if (failed()) return;
  Check(LaunchSquareRoots(count, scale, x, out, compute_stream_),
        "SquareRoots");
}

CudaOps::HostBytes CudaOps::SlicesBytes(absl::Span<const TieredSlice> slices) {
  return {slices.data(),
          static_cast<int64_t>(slices.size() * sizeof(TieredSlice))};
}

CudaOps::HostBytes CudaOps::PiecesBytes(const std::vector<SlicePiece>& pieces) {
  return {pieces.data(),
          static_cast<int64_t>(pieces.size() * sizeof(SlicePiece))};
}

std::vector<char*> CudaOps::UploadAll(std::initializer_list<HostBytes> arrays,
                                      int64_t output_bytes, const char* what) {
  ScratchLayout layout;
  std::vector<int64_t> offsets;
  for (const HostBytes& array : arrays) {
    offsets.push_back(layout.Add<char>(array.bytes));
  }
  offsets.push_back(layout.Add<char>(output_bytes));
  char* scratch = Scratch(layout.bytes(), what);
  if (scratch == nullptr) return {};
  std::vector<char*> places;
  for (const HostBytes& array : arrays) {
    places.push_back(scratch + offsets[places.size()]);
    if (!Upload(array.data, array.bytes, places.back(), what)) return {};
  }
  places.push_back(scratch + offsets.back());
  return places;
}

void CudaOps::AccumulateSquares(absl::Span<const TieredSlice> slices) {
  if (failed() || slices.empty()) return;
  const int64_t count = static_cast<int64_t>(slices.size());
  const SquaresTasks tasks = TieredSquaresTasks(slices.data(), count);
  const int64_t starts_bytes = (count + 1) * int64_t{sizeof(int64_t)};
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices),
                 {tasks.row_task_starts.data(), starts_bytes},
                 {tasks.column_task_starts.data(), starts_bytes}},
                0, "AccumulateSquares");
  if (places.empty()) return;
  Check(LaunchAccumulateSquares(
            At<TieredSlice>(places[0], 0), count, At<int64_t>(places[1], 0),
            At<int64_t>(places[2], 0), tasks.row_task_starts.back(),
            tasks.column_task_starts.back(), compute_stream_),
        "AccumulateSquares");
}

void CudaOps::TieredMeasure(const TieredCoefficients& coefficients,
                            absl::Span<const TieredSlice> slices,
                            absl::Span<double> sums) {
  std::fill(sums.begin(), sums.end(), 0.0);
  if (failed() || slices.empty()) return;
  const std::vector<SlicePiece> pieces =
      TieredPieces(slices.data(), static_cast<int64_t>(slices.size()));
  const int64_t sum_bytes =
      static_cast<int64_t>(pieces.size() * sizeof(double));
  const std::vector<char*> places = UploadAll(
      {SlicesBytes(slices), PiecesBytes(pieces)}, sum_bytes, "TieredMeasure");
  if (places.empty()) return;
  std::vector<double> piece_sums(pieces.size(), 0.0);
  if (!Check(LaunchTieredMeasure(coefficients, At<TieredSlice>(places[0], 0),
                                 At<SlicePiece>(places[1], 0),
                                 static_cast<int64_t>(pieces.size()),
                                 At<double>(places[2], 0), compute_stream_),
             "TieredMeasure") ||
      !Download(places[2], sum_bytes, piece_sums.data(), "TieredMeasure")) {
    return;
  }
  // In piece order, as on the CPU.
  for (size_t p = 0; p < pieces.size(); ++p) {
    sums[pieces[p].slice] += piece_sums[p];
  }
}

void CudaOps::TieredApply(const TieredCoefficients& coefficients,
                          absl::Span<const TieredSlice> slices) {
  if (failed() || slices.empty()) return;
  const std::vector<SlicePiece> pieces =
      TieredPieces(slices.data(), static_cast<int64_t>(slices.size()));
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices), PiecesBytes(pieces)}, 0, "TieredApply");
  if (places.empty()) return;
  Check(LaunchTieredApply(coefficients, At<TieredSlice>(places[0], 0),
                          At<SlicePiece>(places[1], 0),
                          static_cast<int64_t>(pieces.size()), compute_stream_),
        "TieredApply");
}

void CudaOps::TieredUpdate(const TieredCoefficients& coefficients,
                           absl::Span<const TieredSlice> slices,
                           float clip_threshold) {
  if (failed() || slices.empty()) return;
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices)}, 0, "TieredUpdate");
  if (places.empty()) return;
  Check(LaunchTieredUpdate(coefficients, At<TieredSlice>(places[0], 0),
                           static_cast<int64_t>(slices.size()), clip_threshold,
                           compute_stream_),
        "TieredUpdate");
}

void CudaOps::LionUpdate(const TieredCoefficients& coefficients,
                         absl::Span<const TieredSlice> slices) {
  if (failed() || slices.empty()) return;
  const std::vector<SlicePiece> pieces =
      TieredPieces(slices.data(), static_cast<int64_t>(slices.size()));
  const std::vector<char*> places =
      UploadAll({SlicesBytes(slices), PiecesBytes(pieces)}, 0, "LionUpdate");
  if (places.empty()) return;
  Check(LaunchLionUpdate(coefficients, At<TieredSlice>(places[0], 0),
                         At<SlicePiece>(places[1], 0),
                         static_cast<int64_t>(pieces.size()), compute_stream_),
        "LionUpdate");
}

}  // namespace plateau::kernels::cuda
