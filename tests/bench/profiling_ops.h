// An Ops decorator for benchmarks: forwards every call to another backend
// and adds up the wall time spent in each op, and the multiply-adds of the
// matrix products, so a benchmark can say where a step's time goes.
#ifndef PLATEAU_TESTS_BENCH_PROFILING_OPS_H_
#define PLATEAU_TESTS_BENCH_PROFILING_OPS_H_

#include <chrono>
#include <map>
#include <string>

#include "kernels/ops.h"

namespace plateau::bench {

struct OpTime {
  double seconds = 0.0;
  int64_t calls = 0;
  double multiply_adds = 0.0;  // matrix products only
};

class ProfilingOps final : public kernels::Ops {
 public:
  explicit ProfilingOps(kernels::Ops* inner) : inner_(inner) {}

  const std::map<std::string, OpTime>& times() const { return times_; }
  void Reset() { times_.clear(); }

  const char* name() const override { return inner_->name(); }

#define PLATEAU_PROFILE(op_name, work, call)                      \
  do {                                                            \
    const auto start = std::chrono::steady_clock::now();          \
    call;                                                         \
    OpTime& time = times_[op_name];                               \
    time.seconds += std::chrono::duration<double>(                \
                        std::chrono::steady_clock::now() - start) \
                        .count();                                 \
    ++time.calls;                                                 \
    time.multiply_adds += (work);                                 \
  } while (false)

  void Gemm(const kernels::GemmArgs& a) override {
    PLATEAU_PROFILE(GemmName(a), double(a.m) * a.n * a.k, inner_->Gemm(a));
  }
  void GroupedGemm(absl::Span<const kernels::GemmArgs> problems) override {
    double work = 0;
    for (const auto& a : problems) work += double(a.m) * a.n * a.k;
    PLATEAU_PROFILE(problems.empty() ? std::string("Grouped Gemm")
                                     : "Grouped " + GemmName(problems[0]),
                    work, inner_->GroupedGemm(problems));
  }
  absl::Status status() const override { return inner_->status(); }
  void SetMatmulStagingBytes(int64_t bytes) override {
    inner_->SetMatmulStagingBytes(bytes);
  }
  void CopyFromHost(int64_t b, const void* h, void* d) override {
    PLATEAU_PROFILE("CopyFromHost", 0, inner_->CopyFromHost(b, h, d));
  }
  void CopyToHost(int64_t b, const void* d, void* h) override {
    PLATEAU_PROFILE("CopyToHost", 0, inner_->CopyToHost(b, d, h));
  }
  void Fill(int64_t c, float v, float* x) override {
    PLATEAU_PROFILE("Fill", 0, inner_->Fill(c, v, x));
  }
  void CopyToBf16(int64_t c, const float* x, uint16_t* o) override {
    PLATEAU_PROFILE("CopyToBf16", 0, inner_->CopyToBf16(c, x, o));
  }
  void CopyMatrixToBf16(int64_t r, int64_t c, const float* x, int64_t xs,
                        uint16_t* o, int64_t os) override {
    PLATEAU_PROFILE("CopyToBf16", 0,
                    inner_->CopyMatrixToBf16(r, c, x, xs, o, os));
  }
  void CopyFromBf16(int64_t c, const uint16_t* x, float* o) override {
    PLATEAU_PROFILE("CopyFromBf16", 0, inner_->CopyFromBf16(c, x, o));
  }
  void Copy(int64_t c, const float* s, float* d) override {
    PLATEAU_PROFILE("Copy", 0, inner_->Copy(c, s, d));
  }
  void CopyBf16(int64_t c, const uint16_t* s, uint16_t* d) override {
    PLATEAU_PROFILE("CopyBf16", 0, inner_->CopyBf16(c, s, d));
  }
  void Add(int64_t c, const float* a, const float* b, float* o) override {
    PLATEAU_PROFILE("Add", 0, inner_->Add(c, a, b, o));
  }
  void Scale(int64_t c, float f, float* x) override {
    PLATEAU_PROFILE("Scale", 0, inner_->Scale(c, f, x));
  }
  double SumOfSquares(int64_t c, const float* x) override {
    double r;
    PLATEAU_PROFILE("SumOfSquares", 0, r = inner_->SumOfSquares(c, x));
    return r;
  }
  double Sum(int64_t c, const float* x) override {
    double r;
    PLATEAU_PROFILE("Sum", 0, r = inner_->Sum(c, x));
    return r;
  }
  void ColumnSums(int64_t r, int64_t c, const float* x,
                  absl::Span<double> s) override {
    PLATEAU_PROFILE("ColumnSums", 0, inner_->ColumnSums(r, c, x, s));
  }
  void EmbeddingForward(int64_t t, int64_t d, const int32_t* i, const float* tb,
                        float* o) override {
    PLATEAU_PROFILE("Embedding", 0, inner_->EmbeddingForward(t, d, i, tb, o));
  }
  void EmbeddingBackward(int64_t t, int64_t d, const int32_t* i, const float* g,
                         float* dt) override {
    PLATEAU_PROFILE("EmbeddingBackward", 0,
                    inner_->EmbeddingBackward(t, d, i, g, dt));
  }
  void EmbeddingForwardBf16(int64_t t, int64_t d, const int32_t* i,
                            const uint16_t* tb, uint16_t* o) override {
    PLATEAU_PROFILE("Embedding", 0,
                    inner_->EmbeddingForwardBf16(t, d, i, tb, o));
  }
  void EmbeddingBackwardFromBf16(int64_t t, int64_t d, const int32_t* i,
                                 const uint16_t* g, float* dt) override {
    PLATEAU_PROFILE("EmbeddingBackward", 0,
                    inner_->EmbeddingBackwardFromBf16(t, d, i, g, dt));
  }
  void EmbeddingBackwardBf16(int64_t t, int64_t d, const int32_t* i,
                             const uint16_t* g, uint16_t* dt) override {
    PLATEAU_PROFILE("EmbeddingBackward", 0,
                    inner_->EmbeddingBackwardBf16(t, d, i, g, dt));
  }
  void RmsNormForward(int64_t r, int64_t d, const float* x, const float* w,
                      float e, float* o, float* i) override {
    PLATEAU_PROFILE("RmsNorm", 0, inner_->RmsNormForward(r, d, x, w, e, o, i));
  }
  void RmsNormForwardToBf16(int64_t r, int64_t d, const float* x,
                            const float* w, float e, uint16_t* o,
                            float* i) override {
    PLATEAU_PROFILE("RmsNorm", 0,
                    inner_->RmsNormForwardToBf16(r, d, x, w, e, o, i));
  }
  void RmsNormForwardBf16(int64_t r, int64_t d, const uint16_t* x,
                          const float* w, float e, uint16_t* o,
                          float* i) override {
    PLATEAU_PROFILE("RmsNorm", 0,
                    inner_->RmsNormForwardBf16(r, d, x, w, e, o, i));
  }
  void RmsNormBackward(int64_t r, int64_t d, const float* x, const float* w,
                       const float* i, const float* g, float* dx,
                       float* dw) override {
    PLATEAU_PROFILE("RmsNormBackward", 0,
                    inner_->RmsNormBackward(r, d, x, w, i, g, dx, dw));
  }
  void RmsNormBackwardToBf16(int64_t r, int64_t d, const float* x,
                             const float* w, const float* i, const float* g,
                             uint16_t* dx, float* dw) override {
    PLATEAU_PROFILE("RmsNormBackward", 0,
                    inner_->RmsNormBackwardToBf16(r, d, x, w, i, g, dx, dw));
  }
  void RmsNormBackwardBf16(int64_t r, int64_t d, const uint16_t* x,
                           const float* w, const float* i, const float* g,
                           uint16_t* dx, float* dw) override {
    PLATEAU_PROFILE("RmsNormBackward", 0,
                    inner_->RmsNormBackwardBf16(r, d, x, w, i, g, dx, dw));
  }
  void HeadRmsNormForward(int64_t r, int64_t h, int64_t d, int64_t st,
                          const float* w, float e, float* x) override {
    PLATEAU_PROFILE("HeadRmsNorm", 0,
                    inner_->HeadRmsNormForward(r, h, d, st, w, e, x));
  }
  void HeadRmsNormBackward(int64_t r, int64_t h, int64_t d, const float* x,
                           int64_t xs, const float* w, float e, int64_t st,
                           float* dx, float* dw) override {
    PLATEAU_PROFILE(
        "HeadRmsNormBackward", 0,
        inner_->HeadRmsNormBackward(r, h, d, x, xs, w, e, st, dx, dw));
  }
  void RotaryForward(int64_t r, int64_t f, int64_t s, int64_t h, int64_t d,
                     int64_t st, double th, float* x) override {
    PLATEAU_PROFILE("Rotary", 0,
                    inner_->RotaryForward(r, f, s, h, d, st, th, x));
  }
  void RotaryBackward(int64_t r, int64_t f, int64_t s, int64_t h, int64_t d,
                      int64_t st, double th, float* x) override {
    PLATEAU_PROFILE("RotaryBackward", 0,
                    inner_->RotaryBackward(r, f, s, h, d, st, th, x));
  }
  void AttentionForward(const kernels::AttentionShape& s, const float* q,
                        const float* k, const float* v, int64_t qs, float* o,
                        int64_t os, float* l) override {
    PLATEAU_PROFILE("Attention", 2.0 * CausalPairDims(s),
                    inner_->AttentionForward(s, q, k, v, qs, o, os, l));
  }
  void AttentionBackward(const kernels::AttentionShape& s, const float* q,
                         const float* k, const float* v, int64_t qs,
                         const float* o, const float* g, int64_t os,
                         const float* l, float* dq, float* dk,
                         float* dv) override {
    PLATEAU_PROFILE(
        "AttentionBackward", 5.0 * CausalPairDims(s),
        inner_->AttentionBackward(s, q, k, v, qs, o, g, os, l, dq, dk, dv));
  }
  void AttentionForwardBf16(const kernels::AttentionShape& s, const uint16_t* q,
                            const uint16_t* k, const uint16_t* v, int64_t qs,
                            uint16_t* o, int64_t os, float* l) override {
    PLATEAU_PROFILE("Attention", 2.0 * CausalPairDims(s),
                    inner_->AttentionForwardBf16(s, q, k, v, qs, o, os, l));
  }
  void AttentionBackwardBf16(const kernels::AttentionShape& s,
                             const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, int64_t qs, const uint16_t* o,
                             const float* g, int64_t os, const float* l,
                             float* dq, float* dk, float* dv) override {
    PLATEAU_PROFILE(
        "AttentionBackward", 5.0 * CausalPairDims(s),
        inner_->AttentionBackwardBf16(s, q, k, v, qs, o, g, os, l, dq, dk, dv));
  }
  void SwiGluForward(int64_t c, const float* g, const float* u,
                     float* o) override {
    PLATEAU_PROFILE("SwiGlu", 0, inner_->SwiGluForward(c, g, u, o));
  }
  void SwiGluForwardToBf16(int64_t c, const float* g, const float* u,
                           uint16_t* o) override {
    PLATEAU_PROFILE("SwiGlu", 0, inner_->SwiGluForwardToBf16(c, g, u, o));
  }
  void SwiGluBackward(int64_t c, const float* g, const float* u, const float* d,
                      float* dg, float* du) override {
    PLATEAU_PROFILE("SwiGluBackward", 0,
                    inner_->SwiGluBackward(c, g, u, d, dg, du));
  }
  void SwiGluForwardBf16(int64_t c, const uint16_t* g, const uint16_t* u,
                         uint16_t* o) override {
    PLATEAU_PROFILE("SwiGlu", 0, inner_->SwiGluForwardBf16(c, g, u, o));
  }
  void SwiGluBackwardBf16(int64_t c, const uint16_t* g, const uint16_t* u,
                          const float* d, uint16_t* dg, uint16_t* du) override {
    PLATEAU_PROFILE("SwiGluBackward", 0,
                    inner_->SwiGluBackwardBf16(c, g, u, d, dg, du));
  }
  void RouterForward(const kernels::RouterShape& s, const float* l,
                     const float* b, float* p, int32_t* i, float* g, float* lse,
                     float* sums) override {
    PLATEAU_PROFILE("Router", 0,
                    inner_->RouterForward(s, l, b, p, i, g, lse, sums));
  }
  void RouterBackward(const kernels::RouterShape& s, const float* p,
                      const int32_t* i, const float* g, const float* dg,
                      absl::Span<const float> dp, const float* lse, float z,
                      const float* sums, float* dl) override {
    PLATEAU_PROFILE(
        "RouterBackward", 0,
        inner_->RouterBackward(s, p, i, g, dg, dp, lse, z, sums, dl));
  }
  void ComputeExpertLayout(int64_t t, int64_t e, int64_t k, const int32_t* i,
                           int32_t* a, int32_t* r,
                           absl::Span<int64_t> o) override {
    PLATEAU_PROFILE("ExpertLayout", 0,
                    inner_->ComputeExpertLayout(t, e, k, i, a, r, o));
  }
  void GatherRows(int64_t r, int64_t d, const float* x, const int32_t* t,
                  float* o) override {
    PLATEAU_PROFILE("GatherRows", 0, inner_->GatherRows(r, d, x, t, o));
  }
  void GatherRowsBf16(int64_t r, int64_t d, const uint16_t* x, const int32_t* t,
                      uint16_t* o) override {
    PLATEAU_PROFILE("GatherRows", 0, inner_->GatherRowsBf16(r, d, x, t, o));
  }
  void GatherRmsNormedRows(int64_t r, int64_t d, const float* x,
                           const float* inverse_rms, const float* w,
                           const int32_t* t, float* o) override {
    PLATEAU_PROFILE("GatherRmsNormedRows", 0,
                    inner_->GatherRmsNormedRows(r, d, x, inverse_rms, w, t, o));
  }
  void GatherRmsNormedRowsToBf16(int64_t r, int64_t d, const float* x,
                                 const float* inverse_rms, const float* w,
                                 const int32_t* t, uint16_t* o) override {
    PLATEAU_PROFILE(
        "GatherRmsNormedRows", 0,
        inner_->GatherRmsNormedRowsToBf16(r, d, x, inverse_rms, w, t, o));
  }
  void GatherRowsBackward(int64_t t, int64_t k, int64_t d, const float* g,
                          const int32_t* a, float* dx) override {
    PLATEAU_PROFILE("GatherRowsBackward", 0,
                    inner_->GatherRowsBackward(t, k, d, g, a, dx));
  }
  void GatherRowsBackwardBf16(int64_t t, int64_t k, int64_t d,
                              const uint16_t* g, const int32_t* a,
                              float* dx) override {
    PLATEAU_PROFILE("GatherRowsBackwardBf16", 0,
                    inner_->GatherRowsBackwardBf16(t, k, d, g, a, dx));
  }
  void CombineRows(int64_t t, int64_t k, int64_t d, const float* r,
                   const int32_t* a, const float* g, const float* res,
                   float* o) override {
    PLATEAU_PROFILE("CombineRows", 0,
                    inner_->CombineRows(t, k, d, r, a, g, res, o));
  }
  void CombineRowsBackward(int64_t t, int64_t k, int64_t d, const float* r,
                           const int32_t* a, const float* g, const float* go,
                           float* dr, float* dg) override {
    PLATEAU_PROFILE("CombineRowsBackward", 0,
                    inner_->CombineRowsBackward(t, k, d, r, a, g, go, dr, dg));
  }
  void CombineRowsBf16(int64_t t, int64_t k, int64_t d, const uint16_t* r,
                       const int32_t* a, const float* g, const float* res,
                       float* o) override {
    PLATEAU_PROFILE("CombineRowsBf16", 0,
                    inner_->CombineRowsBf16(t, k, d, r, a, g, res, o));
  }
  void CombineRowsBackwardBf16(int64_t t, int64_t k, int64_t d,
                               const uint16_t* r, const int32_t* a,
                               const float* g, const uint16_t* go, uint16_t* dr,
                               float* dg) override {
    PLATEAU_PROFILE(
        "CombineRowsBackwardBf16", 0,
        inner_->CombineRowsBackwardBf16(t, k, d, r, a, g, go, dr, dg));
  }
  void CrossEntropyForward(int64_t t, int64_t v, const float* l,
                           const int32_t* tg, float* lo, float* lse) override {
    PLATEAU_PROFILE("CrossEntropy", 0,
                    inner_->CrossEntropyForward(t, v, l, tg, lo, lse));
  }
  void CrossEntropyFoldBlock(int64_t t, int64_t b, int64_t vb, const float* l,
                             const int32_t* tg, float* lse,
                             float* target) override {
    PLATEAU_PROFILE(
        "CrossEntropy", 0,
        inner_->CrossEntropyFoldBlock(t, b, vb, l, tg, lse, target));
  }
  void CrossEntropyBackward(int64_t t, int64_t b, int64_t vb, const int32_t* tg,
                            const float* lse, float s, float* l) override {
    PLATEAU_PROFILE("CrossEntropyBackward", 0,
                    inner_->CrossEntropyBackward(t, b, vb, tg, lse, s, l));
  }
  void CrossEntropyForwardBf16(int64_t t, int64_t v, const uint16_t* l,
                               const int32_t* tg, float* lo,
                               float* lse) override {
    PLATEAU_PROFILE("CrossEntropy", 0,
                    inner_->CrossEntropyForwardBf16(t, v, l, tg, lo, lse));
  }
  void CrossEntropyFoldBlockBf16(int64_t t, int64_t b, int64_t vb,
                                 const uint16_t* l, const int32_t* tg,
                                 float* lse, float* target) override {
    PLATEAU_PROFILE(
        "CrossEntropy", 0,
        inner_->CrossEntropyFoldBlockBf16(t, b, vb, l, tg, lse, target));
  }
  void CrossEntropyBackwardBf16(int64_t t, int64_t b, int64_t vb,
                                const int32_t* tg, const float* lse, float s,
                                uint16_t* l) override {
    PLATEAU_PROFILE("CrossEntropyBackward", 0,
                    inner_->CrossEntropyBackwardBf16(t, b, vb, tg, lse, s, l));
  }
  void AdamWUpdate(const kernels::AdamWCoefficients& c, int64_t n, float* p,
                   const float* g, float* m, float* v) override {
    PLATEAU_PROFILE("AdamW", 0, inner_->AdamWUpdate(c, n, p, g, m, v));
  }
  void AccumulateSquares(
      absl::Span<const kernels::TieredSlice> slices) override {
    PLATEAU_PROFILE("AccumulateSquares", 0, inner_->AccumulateSquares(slices));
  }
  void SquareRoots(int64_t n, float scale, const float* x,
                   float* out) override {
    PLATEAU_PROFILE("SquareRoots", 0, inner_->SquareRoots(n, scale, x, out));
  }
  void TieredMeasure(const kernels::TieredCoefficients& c,
                     absl::Span<const kernels::TieredSlice> slices,
                     absl::Span<double> sums) override {
    PLATEAU_PROFILE("TieredMeasure", 0, inner_->TieredMeasure(c, slices, sums));
  }
  void TieredApply(const kernels::TieredCoefficients& c,
                   absl::Span<const kernels::TieredSlice> slices) override {
    PLATEAU_PROFILE("TieredApply", 0, inner_->TieredApply(c, slices));
  }
  void TieredUpdate(const kernels::TieredCoefficients& c,
                    absl::Span<const kernels::TieredSlice> slices,
                    float clip) override {
    PLATEAU_PROFILE("TieredUpdate", 0, inner_->TieredUpdate(c, slices, clip));
  }
  void LionUpdate(const kernels::TieredCoefficients& c,
                  absl::Span<const kernels::TieredSlice> slices) override {
    PLATEAU_PROFILE("Lion", 0, inner_->LionUpdate(c, slices));
  }
#undef PLATEAU_PROFILE

 private:
  static std::string GemmName(const kernels::GemmArgs& a) {
    return std::string("Gemm ") +
           (a.transpose_a == kernels::Transpose::kYes ? "T" : "N") +
           (a.transpose_b == kernels::Transpose::kYes ? "T" : "N") +
           (kernels::IsBf16Product(a) ? " bf16" : "");
  }
  // Multiply-adds per head_dim over the causal (query, key) pairs.
  static double CausalPairDims(const kernels::AttentionShape& s) {
    return 1.0 * s.batch * s.heads * s.seq_len * (s.seq_len + 1) / 2 *
           s.head_dim;
  }

  kernels::Ops* inner_;
  std::map<std::string, OpTime> times_;
};

}  // namespace plateau::bench

#endif  // PLATEAU_TESTS_BENCH_PROFILING_OPS_H_
