// A stable least-significant-digit radix sort of int32 keys, 8 bits a pass.
// Each pass counts the digits of every tile of kSortTileItems items, scans
// the counts (digit-major, so that a digit's tiles are in tile order), and
// scatters: within a tile, 256 items at a time, an item goes after the
// tile's earlier items of its digit, so equal digits keep their order and the
// sort is stable and deterministic (no atomics decide an order).
#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

constexpr int kScanThreads = 1024;

__device__ __forceinline__ int DigitOf(int32_t key, int shift) {
  return static_cast<int>((static_cast<uint32_t>(key) >> shift) &
                          (kSortBuckets - 1));
}

// counts[digit * tiles + tile]: the tile's items of that digit.
__global__ void RadixCountKernel(int64_t items, const int32_t* keys, int shift,
                                 int64_t tiles, int32_t* counts) {
  __shared__ int tile_counts[kSortBuckets];
  tile_counts[threadIdx.x] = 0;
  __syncthreads();
  const int64_t tile = blockIdx.x;
  for (int i = 0; i < kSortItemsPerThread; ++i) {
    const int64_t item =
        tile * kSortTileItems + int64_t{i} * kSortBuckets + threadIdx.x;
    if (item < items) atomicAdd(&tile_counts[DigitOf(keys[item], shift)], 1);
  }
  __syncthreads();
  counts[threadIdx.x * tiles + tile] = tile_counts[threadIdx.x];
}

// In place: values[i] <- values[0] + ... + values[i - 1]. One block; thread t
// takes a contiguous run, so the order of additions is fixed.
__global__ void __launch_bounds__(kScanThreads)
    ExclusiveScanKernel(int64_t count, int32_t* values) {
  __shared__ int32_t run_starts[kScanThreads];
  const int64_t per_thread = (count + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * per_thread;
  const int64_t end = begin + per_thread < count ? begin + per_thread : count;
  int32_t total = 0;
  for (int64_t i = begin; i < end; ++i) total += values[i];
  run_starts[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t running = 0;
    for (unsigned int t = 0; t < blockDim.x; ++t) {
      const int32_t run = run_starts[t];
      run_starts[t] = running;
      running += run;
    }
  }
  __syncthreads();
  int32_t running = run_starts[threadIdx.x];
  for (int64_t i = begin; i < end; ++i) {
    const int32_t value = values[i];
    values[i] = running;
    running += value;
  }
}

// positions_in null: the items' own indices.
__global__ void RadixScatterKernel(int64_t items, const int32_t* keys_in,
                                   const int32_t* positions_in, int shift,
                                   int64_t tiles, const int32_t* starts,
                                   int32_t* keys_out, int32_t* positions_out) {
  __shared__ int32_t next[kSortBuckets];
  __shared__ int chunk_digits[kSortBuckets];
  const int64_t tile = blockIdx.x;
  const int self = static_cast<int>(threadIdx.x);
  next[self] = starts[self * tiles + tile];
  __syncthreads();
  for (int chunk = 0; chunk < kSortItemsPerThread; ++chunk) {
    const int64_t item =
        tile * kSortTileItems + int64_t{chunk} * kSortBuckets + self;
    const bool valid = item < items;
    const int digit = valid ? DigitOf(keys_in[item], shift) : -1;
    chunk_digits[self] = digit;
    __syncthreads();
    int rank = 0;
    bool last = true;
    if (valid) {
      for (int other = 0; other < kSortBuckets; ++other) {
        if (chunk_digits[other] != digit) continue;
        if (other < self) ++rank;
        if (other > self) last = false;
      }
      const int32_t position = next[digit] + rank;
      keys_out[position] = keys_in[item];
      positions_out[position] = positions_in != nullptr
                                    ? positions_in[item]
                                    : static_cast<int32_t>(item);
    }
    // Everyone has read next[] before the chunk's last items advance it.
    __syncthreads();
    if (valid && last) next[digit] += rank + 1;
    __syncthreads();
  }
}

}  // namespace

cudaError_t LaunchStableSortByKey(int64_t items, const int32_t* keys,
                                  int key_bits, int32_t* scratch,
                                  SortedItems* sorted, cudaStream_t stream) {
  ForgetStaleError();
  const int64_t tiles = SortTiles(items);
  int32_t* buffers[2][2] = {{scratch, scratch + items},
                            {scratch + 2 * items, scratch + 3 * items}};
  int32_t* counts = scratch + 4 * items;
  const int32_t* keys_in = keys;
  const int32_t* positions_in = nullptr;
  const dim3 grid(static_cast<unsigned int>(tiles));
  const int passes = SortPasses(key_bits);
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * kSortRadixBits;
    int32_t* keys_out = buffers[pass % 2][0];
    int32_t* positions_out = buffers[pass % 2][1];
    PLATEAU_LAUNCH(RadixCountKernel, grid, kSortBuckets, stream)
    (items, keys_in, shift, tiles, counts);
    PLATEAU_LAUNCH(ExclusiveScanKernel, 1, kScanThreads, stream)
    (int64_t{kSortBuckets} * tiles, counts);
    PLATEAU_LAUNCH(RadixScatterKernel, grid, kSortBuckets, stream)
    (items, keys_in, positions_in, shift, tiles, counts, keys_out,
     positions_out);
    keys_in = keys_out;
    positions_in = positions_out;
  }
  sorted->keys = keys_in;
  sorted->positions = positions_in;
  return cudaGetLastError();
}

}  // namespace plateau::kernels::cuda
