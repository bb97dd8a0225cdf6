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

// triangle_tiled: each channel's product O_c = A_c B_c^T tiled like an SGEMM, with the
// channel-innermost layout transposed on its way into shared memory. A block owns TRT_TI (i) x
// TRT_TJ (j) outputs of 8 channels; per step of TRT_BK k it copies a[i0:+TI, k, c0:+8] and
// b[j0:+TJ, k, c0:+8] with 4-byte cp.async (8 lanes per 32-byte channel run, so every sector is
// used whole) into As[k][c][i] / Bs[k][c][j]: per (k, channel) the rows lie contiguous, padded by
// 4 floats so that one warp's copies (8 channels x 4 rows) land in 32 distinct banks. Each thread
// owns an 8 (i) x 8 (j) tile of ONE channel (rows 4 ti + {0..3} and TI / 2 + 4 ti + {0..3}, the
// same for j), read per k as 2 + 2 16-byte quads: 64 multiply-adds per 4 shared-memory loads, and
// all lanes of a warp share the channel so the quads they read are broadcast from <= 128 bytes.
// TRT_STAGES buffers keep the copies of the next steps in flight while this one is multiplied.
// The results leave through shared memory again (TRT_PR thread rows per pass, as [c][i][j]) so
// that each warp stores whole 32-byte runs of 8 channels. Out-of-range rows, k and channels are
// zero-filled by the copy (source size 0) and not stored, so any n and channel count work.
#ifndef TRT_TI
#define TRT_TI 64
#endif
#ifndef TRT_TJ
#define TRT_TJ 64
#endif
#ifndef TRT_BK
#define TRT_BK 4
#endif
#ifndef TRT_STAGES
#define TRT_STAGES 2
#endif
#define TRT_CB 8                                   // channels per block: one 32-byte sector per (row, k)
#define TRT_GI (TRT_TI / 8)                        // thread rows per channel
#define TRT_GJ (TRT_TJ / 8)                        // thread columns per channel
#define TRT_THREADS (TRT_CB * TRT_GI * TRT_GJ)
#define TRT_MIN_BLOCKS_OF (512 / TRT_THREADS)      // blocks per multiprocessor at <= 128 registers
#define TRT_AROW (TRT_TI + 4)
#define TRT_BROW (TRT_TJ + 4)
#define TRT_STAGE_FLOATS (TRT_BK * TRT_CB * (TRT_AROW + TRT_BROW))
#define TRT_SMEM_FLOATS (TRT_STAGES * TRT_STAGE_FLOATS)
static_assert(TRT_TI % 32 == 0 && TRT_TJ % 32 == 0, "tiles of 32, 64 or 128 rows");
static_assert((TRT_GI * TRT_GJ) % 32 == 0, "a warp must hold one channel");
static_assert(TRT_THREADS <= 512 && TRT_MIN_BLOCKS_OF >= 1, "at most 512 threads (128 registers each)");
static_assert(TRT_STAGES >= 2, "at least two stages");
static_assert(TRT_SMEM_FLOATS * 4 <= 48 * 1024, "static shared memory is limited to 48 KB");
// Epilogue staging, per pass: [8 channels][TRT_PR * GI rows][TJ (+16 when a warp spans two rows)],
// the channel stride = 4 mod 32 so that a warp reading 8 channels x 4 j hits 32 banks.
#define TRT_ISTR (TRT_TJ + (TRT_GJ < 8 ? 16 : 0))
__host__ __device__ constexpr int trt_cstride(int pr) { return pr * TRT_GI * TRT_ISTR + ((4 - (pr * TRT_GI * TRT_ISTR) % 32 + 32) % 32); }
__host__ __device__ constexpr int trt_rows_per_pass() {
    return TRT_CB * trt_cstride(8) <= TRT_SMEM_FLOATS ? 8 : TRT_CB * trt_cstride(4) <= TRT_SMEM_FLOATS ? 4
         : TRT_CB * trt_cstride(2) <= TRT_SMEM_FLOATS ? 2 : 1;
}
#define TRT_PR (trt_rows_per_pass())
#define TRT_CSTR (trt_cstride(TRT_PR))
static_assert(TRT_CB * trt_cstride(1) <= TRT_SMEM_FLOATS, "the epilogue staging must fit the tiles' memory");

__device__ __forceinline__ unsigned trt_shared_address(const void* pointer) {
    unsigned address;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(pointer));
    return address;
}
__device__ __forceinline__ void trt_copy4(unsigned shared, const float* global, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared), "l"(global), "r"(valid ? 4 : 0));
}

// One operand's copies: element f = tid + THREADS m of a step's ROWS x 8-channel x BK tile is
// (channel f % 8, row (f / 8) % ROWS, k f / (8 ROWS)). A thread meets SLOTS (row, channel)
// pairs at k offsets kk0 + KSTEP u; it keeps their element offsets (at k = kk0, 32-bit: a and b
// hold fewer than 2^31 floats) and shared addresses, so a copy costs a multiply-add and a compare.
template <int ROWS>
struct TrtLoader {
    static constexpr int PLANE = 8 * ROWS;
    static constexpr int SLOTS = PLANE >= TRT_THREADS ? PLANE / TRT_THREADS : 1;
    static constexpr int KSTEP = PLANE >= TRT_THREADS ? 1 : TRT_THREADS / PLANE;
    static constexpr int COPIES = TRT_BK * PLANE / TRT_THREADS;
    static constexpr unsigned KK_BYTES = TRT_CB * (ROWS + 4) * 4;  // shared bytes per k of the tile
    unsigned source[SLOTS];
    unsigned target[SLOTS];
    bool ok[SLOTS];
    int kk0;
    __device__ __forceinline__ TrtLoader(const float* tile, int row0, int c0, int n, int channels) {
        const int tid = threadIdx.x;
        kk0 = PLANE >= TRT_THREADS ? 0 : tid / PLANE;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int p = (tid + s * TRT_THREADS) % PLANE;
            const int c = p & 7, row = p >> 3;
            ok[s] = row0 + row < n && c0 + c < channels;
            source[s] = ok[s] ? ((row0 + row) * n + kk0) * channels + c0 + c : 0;
            target[s] = trt_shared_address(tile) + kk0 * KK_BYTES + (c * (ROWS + 4) + row) * 4;
        }
    }
    // Step k0's copies into the tile `stage_bytes` past the first stage's.
    __device__ __forceinline__ void copy(const float* __restrict__ t, unsigned stage_bytes, int k0, int n,
                                         int channels) const {
        const int k_base = k0 + kk0;
        const unsigned offset = k0 * channels;
#pragma unroll
        for (int m = 0; m < COPIES; ++m) {
            const int s = m % SLOTS, u = (m / SLOTS) * KSTEP;
            const bool valid = ok[s] && k_base + u < n;
            trt_copy4(target[s] + stage_bytes + u * KK_BYTES, t + (valid ? source[s] + offset + u * channels : 0u), valid);
        }
    }
};

extern "C" __global__ void __launch_bounds__(TRT_THREADS, TRT_MIN_BLOCKS_OF) triangle_tiled(const float* __restrict__ a,
                                                                             const float* __restrict__ b,
                                                                             float* __restrict__ out,
                                                                             int n, int channels) {
    __shared__ __align__(16) float smem[TRT_SMEM_FLOATS];
    const int tid = threadIdx.x;
    const int ch = tid / (TRT_GI * TRT_GJ), t = tid % (TRT_GI * TRT_GJ);
    const int ti = t / TRT_GJ, tj = t % TRT_GJ;
    const int j0 = blockIdx.x * TRT_TJ, i0 = blockIdx.y * TRT_TI, c0 = blockIdx.z * TRT_CB;
    const TrtLoader<TRT_TI> load_a(smem, i0, c0, n, channels);
    const TrtLoader<TRT_TJ> load_b(smem + TRT_BK * TRT_CB * TRT_AROW, j0, c0, n, channels);
    auto a_tile = [&](int stage) { return smem + stage * TRT_STAGE_FLOATS; };
    auto b_tile = [&](int stage) { return smem + stage * TRT_STAGE_FLOATS + TRT_BK * TRT_CB * TRT_AROW; };

    float acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[r][q] = 0.0f;

    const int k_tiles = (n + TRT_BK - 1) / TRT_BK;
#pragma unroll
    for (int s = 0; s < TRT_STAGES - 1; ++s) {
        if (s < k_tiles) {
            load_a.copy(a, s * TRT_STAGE_FLOATS * 4, s * TRT_BK, n, channels);
            load_b.copy(b, s * TRT_STAGE_FLOATS * 4, s * TRT_BK, n, channels);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(TRT_STAGES - 2));
        __syncthreads();  // step kt is in every thread's view; step kt - 1's buffer is free
        const int next = kt + TRT_STAGES - 1;
        if (next < k_tiles) {
            const unsigned stage_bytes = (next % TRT_STAGES) * TRT_STAGE_FLOATS * 4;
            load_a.copy(a, stage_bytes, next * TRT_BK, n, channels);
            load_b.copy(b, stage_bytes, next * TRT_BK, n, channels);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        const float* as = a_tile(kt % TRT_STAGES) + ch * TRT_AROW + 4 * ti;
        const float* bs = b_tile(kt % TRT_STAGES) + ch * TRT_BROW + 4 * tj;
#pragma unroll
        for (int kk = 0; kk < TRT_BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(as + kk * TRT_CB * TRT_AROW);
            const float4 a1 = *reinterpret_cast<const float4*>(as + kk * TRT_CB * TRT_AROW + TRT_TI / 2);
            const float4 b0 = *reinterpret_cast<const float4*>(bs + kk * TRT_CB * TRT_BROW);
            const float4 b1 = *reinterpret_cast<const float4*>(bs + kk * TRT_CB * TRT_BROW + TRT_TJ / 2);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int r = 0; r < 8; ++r)
#pragma unroll
                for (int q = 0; q < 8; ++q) acc[r][q] += av[r] * bv[q];
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // Epilogue: pass p stages thread rows r = p PR .. p PR + PR - 1 of every thread as
    // [channel][rr GI + ti][j], then each warp stores 4 (i, j) runs of 8 channels at a time.
#pragma unroll
    for (int p = 0; p < 8 / TRT_PR; ++p) {
        __syncthreads();  // the tiles (or the previous pass) are no longer read
#pragma unroll
        for (int rr = 0; rr < TRT_PR; ++rr) {
            float* row = smem + ch * TRT_CSTR + (rr * TRT_GI + ti) * TRT_ISTR + 4 * tj;
            const int r = p * TRT_PR + rr;
            *reinterpret_cast<float4*>(row) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
            *reinterpret_cast<float4*>(row + TRT_TJ / 2) = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
        }
        __syncthreads();
#pragma unroll 1
        for (int m = 0; m < 8 * TRT_PR; ++m) {  // 8 channels x PR GI rows x TJ = 8 PR THREADS values
            const int e = tid + m * TRT_THREADS;
            const int c = e & 7, j = (e >> 3) % TRT_TJ, il = e / (8 * TRT_TJ);
            const int r = p * TRT_PR + il / TRT_GI;
            const int i = i0 + (r >> 2) * (TRT_TI / 2) + 4 * (il % TRT_GI) + (r & 3);
            if (i < n && j0 + j < n && c0 + c < channels)
                out[((long long)i * n + j0 + j) * channels + c0 + c] = smem[c * TRT_CSTR + il * TRT_ISTR + j];
        }
    }
}
