// Elementwise kernels: one grid-stride loop each, fully coalesced; the
// formulas are those of the CPU kernels (kernels/cpu/elementwise.cc, moe.cc).
#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

__global__ void FillKernel(int64_t count, float value, float* x) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) x[i] = value;
}

__global__ void AddKernel(int64_t count, const float* a, const float* b,
                          float* out) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    out[i] = a[i] + b[i];
  }
}

__global__ void ScaleKernel(int64_t count, float factor, float* x) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    x[i] *= factor;
  }
}

__global__ void SquareRootsKernel(int64_t count, float scale, const float* x,
                                  float* out) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    out[i] = sqrtf(scale * x[i]);
  }
}

// Inputs and output of float32 or bf16.
template <typename In, typename Out>
__global__ void SwiGluForwardKernel(int64_t count, const In* gate, const In* up,
                                    Out* out) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const float g = ValueOf(gate[i]);
    StoreAs(g / (1.0f + expf(-g)) * ValueOf(up[i]), &out[i]);
  }
}

__global__ void CopyToBf16Kernel(int64_t count, const float* x, uint16_t* out) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    StoreAs(x[i], &out[i]);
  }
}

__global__ void CopyMatrixToBf16Kernel(int64_t rows, int64_t columns,
                                       const float* x, int64_t x_stride,
                                       uint16_t* out, int64_t out_stride) {
  const int64_t count = rows * columns;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const int64_t row = i / columns, column = i % columns;
    StoreAs(x[row * x_stride + column], &out[row * out_stride + column]);
  }
}

__global__ void WidenBf16Kernel(int64_t count, const uint16_t* x, float* out) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    out[i] = DeviceBfloat16ToFloat(x[i]);
  }
}

// silu'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g); gate and up of
// float32 or bf16, dgate and dup stored as float32 or bf16.
template <typename In, typename Out>
__global__ void SwiGluBackwardKernel(int64_t count, const In* gate,
                                     const In* up, const float* dout,
                                     Out* dgate, Out* dup) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const float g = ValueOf(gate[i]);
    const float s = 1.0f / (1.0f + expf(-g));
    const float d = dout[i];
    StoreAs(d * ValueOf(up[i]) * s * (1.0f + g * (1.0f - s)), &dgate[i]);
    StoreAs(d * (g * s), &dup[i]);
  }
}

__global__ void AdamWKernel(AdamWCoefficients c, int64_t count, float* params,
                            const float* grads, float* m, float* v) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const float g = grads[i];
    const float m_new = fmaf(c.beta1, m[i], c.one_minus_beta1 * g);
    const float v_new = fmaf(c.beta2, v[i], c.one_minus_beta2 * (g * g));
    const float denominator =
        fmaf(sqrtf(v_new), c.inverse_sqrt_correction2, c.epsilon);
    params[i] = fmaf(params[i], c.decay, -(c.step_size * m_new) / denominator);
    m[i] = m_new;
    v[i] = v_new;
  }
}

dim3 Blocks(int64_t count) {
  return dim3(static_cast<unsigned int>(GridStrideBlocks(count)));
}

// The kernels are named by variables: PLATEAU_LAUNCH is a macro, and a
// template's argument list would split its arguments.
template <typename In, typename Out>
cudaError_t LaunchSwiGluForwardAs(int64_t count, const In* gate, const In* up,
                                  Out* out, cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  const auto kernel = SwiGluForwardKernel<In, Out>;
  PLATEAU_LAUNCH(kernel, Blocks(count), kBlockThreads, stream)
  (count, gate, up, out);
  return cudaGetLastError();
}

template <typename In, typename Out>
cudaError_t LaunchSwiGluBackwardOf(int64_t count, const In* gate, const In* up,
                                   const float* dout, Out* dgate, Out* dup,
                                   cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  const auto kernel = SwiGluBackwardKernel<In, Out>;
  PLATEAU_LAUNCH(kernel, Blocks(count), kBlockThreads, stream)
  (count, gate, up, dout, dgate, dup);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFill(int64_t count, float value, float* x,
                       cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(FillKernel, Blocks(count), kBlockThreads, stream)
  (count, value, x);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(int64_t count, const float* a, const float* b, float* out,
                      cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(AddKernel, Blocks(count), kBlockThreads, stream)
  (count, a, b, out);
  return cudaGetLastError();
}

cudaError_t LaunchScale(int64_t count, float factor, float* x,
                        cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(ScaleKernel, Blocks(count), kBlockThreads, stream)
  (count, factor, x);
  return cudaGetLastError();
}

cudaError_t LaunchSquareRoots(int64_t count, float scale, const float* x,
                              float* out, cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(SquareRootsKernel, Blocks(count), kBlockThreads, stream)
  (count, scale, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluForward(int64_t count, const float* gate,
                                const float* up, float* out,
                                cudaStream_t stream) {
  return LaunchSwiGluForwardAs(count, gate, up, out, stream);
}

cudaError_t LaunchSwiGluForwardToBf16(int64_t count, const float* gate,
                                      const float* up, uint16_t* out,
                                      cudaStream_t stream) {
  return LaunchSwiGluForwardAs(count, gate, up, out, stream);
}

cudaError_t LaunchCopyToBf16(int64_t count, const float* x, uint16_t* out,
                             cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(CopyToBf16Kernel, Blocks(count), kBlockThreads, stream)
  (count, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchCopyMatrixToBf16(int64_t rows, int64_t columns,
                                   const float* x, int64_t x_stride,
                                   uint16_t* out, int64_t out_stride,
                                   cudaStream_t stream) {
  ForgetStaleError();
  if (rows == 0 || columns == 0) return cudaSuccess;
  PLATEAU_LAUNCH(CopyMatrixToBf16Kernel, Blocks(rows * columns), kBlockThreads,
                 stream)
  (rows, columns, x, x_stride, out, out_stride);
  return cudaGetLastError();
}

cudaError_t LaunchWidenBf16(int64_t count, const uint16_t* x, float* out,
                            cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(WidenBf16Kernel, Blocks(count), kBlockThreads, stream)
  (count, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluForwardBf16(int64_t count, const uint16_t* gate,
                                    const uint16_t* up, uint16_t* out,
                                    cudaStream_t stream) {
  return LaunchSwiGluForwardAs(count, gate, up, out, stream);
}

cudaError_t LaunchSwiGluBackward(int64_t count, const float* gate,
                                 const float* up, const float* dout,
                                 float* dgate, float* dup,
                                 cudaStream_t stream) {
  return LaunchSwiGluBackwardOf(count, gate, up, dout, dgate, dup, stream);
}

cudaError_t LaunchSwiGluBackward(int64_t count, const uint16_t* gate,
                                 const uint16_t* up, const float* dout,
                                 uint16_t* dgate, uint16_t* dup,
                                 cudaStream_t stream) {
  return LaunchSwiGluBackwardOf(count, gate, up, dout, dgate, dup, stream);
}

cudaError_t LaunchAdamWUpdate(const AdamWCoefficients& coefficients,
                              int64_t count, float* params, const float* grads,
                              float* first_moment, float* second_moment,
                              cudaStream_t stream) {
  ForgetStaleError();
  if (count == 0) return cudaSuccess;
  PLATEAU_LAUNCH(AdamWKernel, Blocks(count), kBlockThreads, stream)
  (coefficients, count, params, grads, first_moment, second_moment);
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
