// Outgoing triangle update contraction (AlphaFold): out[i, j, c] = sum_k a[i, k, c] * b[j, k, c].
// FP32, a and b contiguous n x n x channels; one thread per output, channels fastest so that
// neighbouring threads read neighbouring floats.
extern "C" __global__ void triangle(const float* __restrict__ a,
                                    const float* __restrict__ b,
                                    float* __restrict__ out,
                                    int n, int channels) {
    const long long total = (long long)n * n * channels;
    const long long index = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= total) return;
    const int c = (int)(index % channels);
    const long long ij = index / channels;
    const int j = (int)(ij % n);
    const int i = (int)(ij / n);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) {
        sum += a[((long long)i * n + k) * channels + c] * b[((long long)j * n + k) * channels + c];
    }
    out[index] = sum;
}

// triangle_batched: the contraction as what it is, a batch over channels c of products
// O_c = A_c B_c^T with A_c[i, k] = a[i, k, c]. A block owns a 32 (i) x 32 (j) x 16 (c) output
// tile; per step of 8 k it stages a[i0:+32, k0:+8, c0:+16] and b[j0:+32, k0:+8, c0:+16] in
// shared memory (channels innermost, so every global read is a 64-byte run of 16-byte quads),
// while the next step's quads are already loading into registers. Each thread accumulates a
// 4 (i) x 4 (j) x 4 (c) tile: per k it reads 4 quads of a and 4 of b and does 64 multiply-adds.
// Its rows are strided (i0 + ig + 8 r), so the two row groups of a warp phase hit distinct banks.
// Out-of-range i, j, k and channels load as zero and are not stored; widths that are not a
// multiple of 4 (or unaligned buffers) go through per-element loads and stores.
#define TRI_TI 32
#define TRI_TJ 32
#define TRI_CB 16
#define TRI_BK 8
#define TRI_THREADS 256
#ifndef TRI_MIN_BLOCKS
#define TRI_MIN_BLOCKS 1  // blocks per multiprocessor asked of the register allocator (2: 128 registers, small spills)
#endif
#define TRI_LOADS (TRI_BK * TRI_TI * TRI_CB / 4 / TRI_THREADS)  // quads per thread per operand per step

__device__ __forceinline__ void fma4(float4& acc, float4 a, float4 b) {
    acc.x += a.x * b.x;
    acc.y += a.y * b.y;
    acc.z += a.z * b.z;
    acc.w += a.w * b.w;
}

// Quad (row, k, c..c+3) of an n x n x channels tensor, zero outside it.
__device__ __forceinline__ float4 load_quad_nnc(const float* __restrict__ t, int row, int k, int c, int n, int channels,
                                                bool vector) {
    if (row >= n || k >= n || c >= channels) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float* p = t + ((long long)row * n + k) * channels + c;
    if (vector) return *reinterpret_cast<const float4*>(p);
    return make_float4(p[0], c + 1 < channels ? p[1] : 0.0f, c + 2 < channels ? p[2] : 0.0f,
                       c + 3 < channels ? p[3] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(TRI_THREADS, TRI_MIN_BLOCKS) triangle_batched(const float* __restrict__ a,
                                                                           const float* __restrict__ b,
                                                                           float* __restrict__ out,
                                                                           int n, int channels) {
    __shared__ __align__(16) float As[TRI_BK][TRI_TI][TRI_CB];
    __shared__ __align__(16) float Bs[TRI_BK][TRI_TJ][TRI_CB];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cq = lane & 3;                                // channel quad of the thread
    const int ig = ((warp & 3) << 1) | ((lane >> 2) & 1);  // 0..7: rows i0 + ig + 8 r
    const int jg = ((warp >> 2) << 2) | (lane >> 3);       // 0..7: columns j0 + jg + 8 s
    const int j0 = blockIdx.x * TRI_TJ, i0 = blockIdx.y * TRI_TI, c0 = blockIdx.z * TRI_CB;
    const bool vector = (channels & 3) == 0 &&
        ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b) |
          reinterpret_cast<unsigned long long>(out)) & 15) == 0;

    float4 acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < 4; ++s) acc[r][s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    // Staging: quad f = tid + 256 l of a step is (row f / 32, k (f / 4) % 8, channel quad f % 4).
    float4 a_next[TRI_LOADS], b_next[TRI_LOADS];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int l = 0; l < TRI_LOADS; ++l) {
            const int f = tid + l * TRI_THREADS;
            const int row = f >> 5, kk = (f >> 2) & 7, c = c0 + (f & 3) * 4;
            a_next[l] = load_quad_nnc(a, i0 + row, k0 + kk, c, n, channels, vector);
            b_next[l] = load_quad_nnc(b, j0 + row, k0 + kk, c, n, channels, vector);
        }
    };
    auto stage = [&]() {
#pragma unroll
        for (int l = 0; l < TRI_LOADS; ++l) {
            const int f = tid + l * TRI_THREADS;
            const int row = f >> 5, kk = (f >> 2) & 7, q = f & 3;
            *reinterpret_cast<float4*>(&As[kk][row][q * 4]) = a_next[l];
            *reinterpret_cast<float4*>(&Bs[kk][row][q * 4]) = b_next[l];
        }
    };

    const int k_tiles = (n + TRI_BK - 1) / TRI_BK;
    fetch(0);
    stage();
    __syncthreads();
    for (int t = 0; t < k_tiles; ++t) {
        if (t + 1 < k_tiles) fetch((t + 1) * TRI_BK);  // in flight while this step computes
#pragma unroll
        for (int kk = 0; kk < TRI_BK; ++kk) {
            float4 av[4], bv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) av[r] = *reinterpret_cast<const float4*>(&As[kk][ig + 8 * r][cq * 4]);
#pragma unroll
            for (int s = 0; s < 4; ++s) bv[s] = *reinterpret_cast<const float4*>(&Bs[kk][jg + 8 * s][cq * 4]);
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 4; ++s) fma4(acc[r][s], av[r], bv[s]);
        }
        __syncthreads();  // every thread is done reading this step's tiles
        if (t + 1 < k_tiles) {
            stage();
            __syncthreads();
        }
    }

    const int c = c0 + cq * 4;
    if (c >= channels) return;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = i0 + ig + 8 * r;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int j = j0 + jg + 8 * s;
            if (i >= n || j >= n) continue;
            float* p = out + ((long long)i * n + j) * channels + c;
            const float4 v = acc[r][s];
            if (vector) {
                *reinterpret_cast<float4*>(p) = v;
            } else {
                p[0] = v.x;
                if (c + 1 < channels) p[1] = v.y;
                if (c + 2 < channels) p[2] = v.z;
                if (c + 3 < channels) p[3] = v.w;
            }
        }
    }
}
