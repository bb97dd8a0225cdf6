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
// quads, blockIdx.y over runs of consecutive rows), loads its bias quad once and streams
// ROWS_IN_FLIGHT independent rows per iteration (loads issued before any arithmetic). Otherwise (a bias row
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

extern "C" __global__ void __launch_bounds__(256, 8) bias_gelu_vec4(const float* __restrict__ x,
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
        // Block row y owns a run of consecutive rows, so the blocks resident at any moment
        // stream one contiguous window of x and y (as a flat 1-D split would).
        const long long chunk = (rows + gridDim.y - 1) / gridDim.y;
        const long long first = blockIdx.y * chunk;
        int count = (int)max(0LL, min(rows - first, chunk));
        const float4* x4 = reinterpret_cast<const float4*>(x) + first * col_quads + q;
        float4* y4 = reinterpret_cast<float4*>(y) + first * col_quads + q;
        for (; count >= ROWS_IN_FLIGHT; count -= ROWS_IN_FLIGHT) {
            float4 v[ROWS_IN_FLIGHT];
#pragma unroll
            for (int r = 0; r < ROWS_IN_FLIGHT; ++r) v[r] = __ldcs(x4 + r * col_quads);
#pragma unroll
            for (int r = 0; r < ROWS_IN_FLIGHT; ++r) __stcs(y4 + r * col_quads, gelu4(v[r], b));
            x4 += ROWS_IN_FLIGHT * col_quads;
            y4 += ROWS_IN_FLIGHT * col_quads;
        }
        for (; count > 0; --count, x4 += col_quads, y4 += col_quads) __stcs(y4, gelu4(__ldcs(x4), b));
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

// flat: the layout of a fast elementwise kernel (and of the Triton baseline): x and y as one
// flat array of quads, block b owning the contiguous run of GELU_FLAT_QUADS * THREADS quads from
// b * GELU_FLAT_QUADS * THREADS, thread t the quads t, t + THREADS, ... of it (each access
// coalesced across the block), all of a thread's x loads issued before any arithmetic, a grid
// sized to the array (no grid-stride loop, no per-row bookkeeping), at most 32 registers so
// that 2048 threads fill an SM. The bias quad of flat quad q is q mod (cols / 4) (cols a
// multiple of 4): one 32-bit remainder per thread, then a wrapping step of THREADS mod
// (cols / 4), read through the read-only path (16 KiB of bias: always an L1 hit).
// GELU_FLAT_STREAM 1: x read with evict-first loads and y written with streaming stores;
// 2: x read with an L2 evict-first policy and no L1 allocation, y written with plain stores.
// Any other case (cols not a multiple of 4, a misaligned array, over 2^31 quads) takes an
// element-wise grid-stride loop over the same grid.
#ifndef GELU_FLAT_QUADS
#define GELU_FLAT_QUADS 2
#endif
#ifndef GELU_FLAT_THREADS
#define GELU_FLAT_THREADS 256
#endif
#ifndef GELU_FLAT_STREAM
#define GELU_FLAT_STREAM 1
#endif

__device__ __forceinline__ float4 flat_load(const float4* p) {
#if GELU_FLAT_STREAM == 2
    // Past L1 (no allocation: no reuse) and first out of L2, so that x lines leave L2 before
    // the dirty y lines written beside them; stores stay plain.
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(policy));
    return v;
#elif GELU_FLAT_STREAM
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void flat_store(float4* p, float4 v) {
#if GELU_FLAT_STREAM == 1
    __stcs(p, v);
#else
    *p = v;
#endif
}

extern "C" __global__ void __launch_bounds__(GELU_FLAT_THREADS, 2048 / GELU_FLAT_THREADS)
bias_gelu_flat(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
               long long total, int cols) {
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y) |
                           reinterpret_cast<unsigned long long>(bias)) & 15) == 0;
    if (aligned && (cols & 3) == 0 && total >= 4 && total / 4 < 0x7fffffffLL) {
        const unsigned quads = (unsigned)(total >> 2), col_quads = (unsigned)cols >> 2;
        const unsigned first = blockIdx.x * (GELU_FLAT_QUADS * GELU_FLAT_THREADS) + threadIdx.x;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        float4* y4 = reinterpret_cast<float4*>(y);
        float4 v[GELU_FLAT_QUADS];
        // Past the end (the last block only) a thread loads the last quad again, so that the
        // loads need no branch; only the stores are guarded.
#pragma unroll
        for (int k = 0; k < GELU_FLAT_QUADS; ++k) v[k] = flat_load(x4 + min(first + k * GELU_FLAT_THREADS, quads - 1));
        unsigned c = first % col_quads;
        const unsigned step = GELU_FLAT_THREADS % col_quads;
#pragma unroll
        for (int k = 0; k < GELU_FLAT_QUADS; ++k) {
            const unsigned q = first + k * GELU_FLAT_THREADS;
            if (q < quads) flat_store(y4 + q, gelu4(v[k], __ldg(b4 + c)));
            c += step;
            if (c >= col_quads) c -= col_quads;
        }
        return;
    }
    const long long stride = (long long)gridDim.x * GELU_FLAT_THREADS;
    for (long long e = (long long)blockIdx.x * GELU_FLAT_THREADS + threadIdx.x; e < total; e += stride) {
        y[e] = gelu_fast(x[e] + bias[(int)(e % cols)]);
    }
}
