// Layer normalization with a learned weight and bias, FP32:
//   y = (x - mean) / sqrt(var + eps) * w + b, var the centred (population) variance of the row.
// Two layouts of seed 000: layernorm_block (a block per row, shared-memory tree with barriers,
// the first version) and layernorm_warp (a warp per row, eight warps per block, 128-bit loads
// when the width is a multiple of 4, shuffle reductions; the rewrite).

__device__ __forceinline__ float affine(float v, float mean, float rstd, float w, float b) {
    return (v - mean) * rstd * w + b;
}

// Sum over the block; every thread must call it. partial holds blockDim.x floats.
__device__ float block_sum(float value, float* partial) {
    partial[threadIdx.x] = value;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float total = partial[0];
    __syncthreads();  // partial is reused by the next call
    return total;
}

extern "C" __global__ void layernorm_block(const float* __restrict__ x, const float* __restrict__ weight,
                                           const float* __restrict__ bias, float* __restrict__ y,
                                           int rows, int cols, float eps) {
    extern __shared__ float partial[];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* x_row = x + (size_t)row * cols;
    float* y_row = y + (size_t)row * cols;

    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += x_row[c];
    const float mean = block_sum(sum, partial) / cols;

    float squares = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = x_row[c] - mean;
        squares += d * d;
    }
    const float rstd = rsqrtf(block_sum(squares, partial) / cols + eps);

    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        y_row[c] = affine(x_row[c], mean, rstd, weight[c], bias[c]);
    }
}

__device__ __forceinline__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
    return __shfl_sync(0xffffffffu, value, 0);
}

extern "C" __global__ void layernorm_warp(const float* __restrict__ x, const float* __restrict__ weight,
                                          const float* __restrict__ bias, float* __restrict__ y,
                                          int rows, int cols, float eps) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;  // whole warps leave together, so the shuffles stay full-warp
    const float* x_row = x + (size_t)row * cols;
    float* y_row = y + (size_t)row * cols;

    if ((cols & 3) == 0) {
        // Rows start on 16-byte boundaries when cols is a multiple of 4 (allocations are aligned).
        const float4* x4 = reinterpret_cast<const float4*>(x_row);
        const int quads = cols / 4;
        float sum = 0.0f;
        for (int q = lane; q < quads; q += 32) {
            const float4 v = x4[q];
            sum += (v.x + v.y) + (v.z + v.w);
        }
        const float mean = warp_sum(sum) / cols;
        float squares = 0.0f;
        for (int q = lane; q < quads; q += 32) {
            const float4 v = x4[q];
            const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
            squares += (a * a + b * b) + (c * c + d * d);
        }
        const float rstd = rsqrtf(warp_sum(squares) / cols + eps);
        const float4* w4 = reinterpret_cast<const float4*>(weight);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        float4* y4 = reinterpret_cast<float4*>(y_row);
        for (int q = lane; q < quads; q += 32) {
            const float4 v = x4[q], w = w4[q], b = b4[q];
            y4[q] = make_float4(affine(v.x, mean, rstd, w.x, b.x), affine(v.y, mean, rstd, w.y, b.y),
                                affine(v.z, mean, rstd, w.z, b.z), affine(v.w, mean, rstd, w.w, b.w));
        }
    } else {
        float sum = 0.0f;
        for (int c = lane; c < cols; c += 32) sum += x_row[c];
        const float mean = warp_sum(sum) / cols;
        float squares = 0.0f;
        for (int c = lane; c < cols; c += 32) {
            const float d = x_row[c] - mean;
            squares += d * d;
        }
        const float rstd = rsqrtf(warp_sum(squares) / cols + eps);
        for (int c = lane; c < cols; c += 32) y_row[c] = affine(x_row[c], mean, rstd, weight[c], bias[c]);
    }
}
