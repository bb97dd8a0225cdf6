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
