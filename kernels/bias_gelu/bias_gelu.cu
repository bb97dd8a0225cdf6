// y = GELU(x + b), tanh form: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), z = x + b.
// FP32, contiguous rows x cols, one thread per element in a grid-stride loop.
extern "C" __global__ void bias_gelu(const float* __restrict__ x,
                                     const float* __restrict__ bias,
                                     float* __restrict__ y,
                                     long long total, int cols) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float z = x[i] + bias[i % cols];
        const float inner = 0.7978845608028654f * (z + 0.044715f * z * z * z);
        y[i] = 0.5f * z * (1.0f + tanhf(inner));
    }
}

// vec4: the same function at copy speed. GELU_tanh(z) = 0.5 z (1 + tanh(u)) = z / (1 + exp(-2u))
// exactly, so one fast exponential and one fast division replace tanhf and its cancellation
// near z << 0. Rows are handled as 16-byte quads: when cols is a multiple of 4 and x, y, bias
// are 16-byte aligned, a thread owns one column quad of a 2-D grid (blockIdx.x over column
// quads, blockIdx.y striding over rows), loads its bias quad once and streams ROWS_IN_FLIGHT
// independent rows per iteration (loads issued before any arithmetic). Otherwise (a bias row
// that does not start every row on a quad) the flat array is still read in quads and the bias
// index of each element is tracked with a wrap-around counter; the last total % 4 elements,
// and everything when x or y is misaligned, go through a scalar loop.
#define ROWS_IN_FLIGHT 4

__device__ __forceinline__ float gelu_fast(float z) {
    const float u = 0.7978845608028654f * (z + 0.044715f * z * z * z);
    return __fdividef(z, 1.0f + __expf(-2.0f * u));
}

__device__ __forceinline__ float4 gelu4(float4 v, float4 b) {
    return make_float4(gelu_fast(v.x + b.x), gelu_fast(v.y + b.y), gelu_fast(v.z + b.z), gelu_fast(v.w + b.w));
}

extern "C" __global__ void bias_gelu_vec4(const float* __restrict__ x,
                                          const float* __restrict__ bias,
                                          float* __restrict__ y,
                                          long long total, int cols) {
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15) == 0;
    const bool bias_aligned = (reinterpret_cast<unsigned long long>(bias) & 15) == 0;
    const int col_quads = cols >> 2;
    if (aligned && bias_aligned && (cols & 3) == 0) {
        const int q = blockIdx.x * blockDim.x + threadIdx.x;
        if (q >= col_quads) return;
        const long long rows = total / cols;
        const float4 b = reinterpret_cast<const float4*>(bias)[q];
        const float4* x4 = reinterpret_cast<const float4*>(x) + q;
        float4* y4 = reinterpret_cast<float4*>(y) + q;
        const long long step = gridDim.y;
        long long row = blockIdx.y;
        for (; row + (ROWS_IN_FLIGHT - 1) * step < rows; row += ROWS_IN_FLIGHT * step) {
            float4 v[ROWS_IN_FLIGHT];
#pragma unroll
            for (int r = 0; r < ROWS_IN_FLIGHT; ++r) v[r] = __ldcs(x4 + (row + r * step) * col_quads);
#pragma unroll
            for (int r = 0; r < ROWS_IN_FLIGHT; ++r) __stcs(y4 + (row + r * step) * col_quads, gelu4(v[r], b));
        }
        for (; row < rows; row += step) __stcs(y4 + row * col_quads, gelu4(__ldcs(x4 + row * col_quads), b));
        return;
    }
    const long long thread = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    const long long threads = (long long)gridDim.x * gridDim.y * blockDim.x;
    const long long quads = aligned ? total / 4 : 0;
    for (long long q = thread; q < quads; q += threads) {
        const float4 v = reinterpret_cast<const float4*>(x)[q];
        int c = (int)((4 * q) % cols);
        float b[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            b[k] = bias[c];
            c = (c + 1 == cols) ? 0 : c + 1;
        }
        reinterpret_cast<float4*>(y)[q] = gelu4(v, make_float4(b[0], b[1], b[2], b[3]));
    }
    for (long long i = 4 * quads + thread; i < total; i += threads) {
        y[i] = gelu_fast(x[i] + bias[(int)(i % cols)]);
    }
}
