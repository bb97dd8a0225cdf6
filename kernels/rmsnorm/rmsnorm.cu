// RMSNorm, one block per row: y = x * w / sqrt(mean(x^2) + eps), FP32 throughout.
// Threads accumulate strided columns, meet in a shared-memory tree, then write the row.
// The launch chooses blockDim.x (a power of two) and passes blockDim.x floats of
// dynamic shared memory; the same source serves every layout.
extern "C" __global__ void rmsnorm(const float* __restrict__ x,
                                   const float* __restrict__ weight,
                                   float* __restrict__ y,
                                   int rows, int cols, float eps) {
    extern __shared__ float partial[];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* x_row = x + (size_t)row * cols;
    float* y_row = y + (size_t)row * cols;

    float sum_squares = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = x_row[c];
        sum_squares += v * v;
    }
    partial[threadIdx.x] = sum_squares;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / cols + eps);

    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        y_row[c] = x_row[c] * weight[c] * inv_rms;
    }
}

// rmsnorm_vec: one read of x, the row held in registers. blockDim.x threads share a row
// (whole warps, up to 1024, chosen by the launch from the width so that the row fits
// in RMSNORM_VEC quads per thread); with blockDim.x == 32 each warp owns a row and a block
// holds blockDim.y rows, otherwise one row per block. A row is split into a head (the 0-3
// elements before x's first 16-byte boundary, which rows of odd widths need), 128-bit quads,
// and a tail of 0-3 elements; head and tail are held by the first threads as scalars. When
// x and y rows are not equally aligned, every element goes through the scalar slots instead.
// The sum of squares meets by xor-shuffles in each warp, then across warps in shared memory.
#ifndef RMSNORM_VEC
#define RMSNORM_VEC 8
#endif
// The most threads per row the launch may choose: __launch_bounds__ then caps the registers
// at 65536 / RMSNORM_MAX_THREADS per thread, so that every launch the spec allows can start.
#ifndef RMSNORM_MAX_THREADS
#define RMSNORM_MAX_THREADS 512
#endif

__device__ __forceinline__ float row_sum(float v, float* warp_partial) {
    for (int lane_mask = 16; lane_mask > 0; lane_mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, lane_mask);
    if (blockDim.x == 32) return v;  // a warp per row: every lane already holds the row's sum
    const int warps = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) warp_partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += warp_partial[w];
    __syncthreads();  // warp_partial may be written again by a later call
    return total;
}

extern "C" __global__ void __launch_bounds__(RMSNORM_MAX_THREADS) rmsnorm_vec(const float* __restrict__ x,
                                       const float* __restrict__ weight,
                                       float* __restrict__ y,
                                       int rows, int cols, float eps) {
    __shared__ float warp_partial[32];
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) return;  // only in a warp-per-row block, and then for whole warps
    const int tid = threadIdx.x, threads = blockDim.x;
    const float* x_row = x + (size_t)row * cols;
    float* y_row = y + (size_t)row * cols;
    const unsigned long long x_address = reinterpret_cast<unsigned long long>(x_row);
    const bool vector = ((x_address ^ reinterpret_cast<unsigned long long>(y_row)) & 15) == 0;
    const int head = vector ? min(cols, (int)(((16 - (x_address & 15)) & 15) >> 2)) : 0;
    const int quads = vector ? (cols - head) >> 2 : 0;
    const int tail = cols - head - 4 * quads;  // scalar path: the whole row is "tail"

    float4 v[RMSNORM_VEC];
    float h = 0.0f;
    if (tid < head) h = x_row[tid];
    if (vector) {
        const float4* x4 = reinterpret_cast<const float4*>(x_row + head);
#pragma unroll
        for (int k = 0; k < RMSNORM_VEC; ++k) {
            const int q = tid + k * threads;
            v[k] = q < quads ? x4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int k = 0; k < RMSNORM_VEC; ++k) {
            const int c = 4 * k * threads + tid;
            v[k] = make_float4(c < tail ? x_row[c] : 0.0f, c + threads < tail ? x_row[c + threads] : 0.0f,
                               c + 2 * threads < tail ? x_row[c + 2 * threads] : 0.0f,
                               c + 3 * threads < tail ? x_row[c + 3 * threads] : 0.0f);
        }
    }
    const int tail_start = head + 4 * quads;
    float t = 0.0f;
    if (vector && tid < tail) t = x_row[tail_start + tid];

    float ss = h * h + t * t;
#pragma unroll
    for (int k = 0; k < RMSNORM_VEC; ++k) ss += (v[k].x * v[k].x + v[k].y * v[k].y) + (v[k].z * v[k].z + v[k].w * v[k].w);
    const float inv_rms = rsqrtf(row_sum(ss, warp_partial) / cols + eps);

    if (tid < head) y_row[tid] = h * weight[tid] * inv_rms;
    if (vector) {
        if (tid < tail) y_row[tail_start + tid] = t * weight[tail_start + tid] * inv_rms;
        const bool weight_vector = head == 0 && (reinterpret_cast<unsigned long long>(weight) & 15) == 0;
        float4* y4 = reinterpret_cast<float4*>(y_row + head);
#pragma unroll
        for (int k = 0; k < RMSNORM_VEC; ++k) {
            const int q = tid + k * threads;
            if (q >= quads) break;
            const int c = head + 4 * q;
            const float4 w = weight_vector ? reinterpret_cast<const float4*>(weight)[q]
                                           : make_float4(weight[c], weight[c + 1], weight[c + 2], weight[c + 3]);
            y4[q] = make_float4(v[k].x * w.x * inv_rms, v[k].y * w.y * inv_rms, v[k].z * w.z * inv_rms,
                                v[k].w * w.w * inv_rms);
        }
    } else {
#pragma unroll
        for (int k = 0; k < RMSNORM_VEC; ++k) {
            const float held[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = (4 * k + j) * threads + tid;
                if (c < tail) y_row[c] = held[j] * weight[c] * inv_rms;
            }
        }
    }
}
