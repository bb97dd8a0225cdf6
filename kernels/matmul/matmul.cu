// C = A B in FP32, row-major: A is M x K, B is K x N, C is M x N. Two layouts of seed 000:
// matmul_tile16 (one output per thread from 16 x 16 shared-memory tiles: the first version) and
// matmul_reg4x4 (a 64 x 64 block tile, a 4 x 4 register tile of outputs per thread, contraction
// step 32, 128-bit loads into shared memory where rows allow them: the rewrite).
// Both handle sizes that are multiples of no tile: out-of-range loads read zero, out-of-range
// outputs are not written.

extern "C" __global__ void matmul_tile16(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * 16 + ty;
    const int col = blockIdx.x * 16 + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + 15) / 16; ++t) {
        const int ka = t * 16 + tx;
        const int kb = t * 16 + ty;
        As[ty][tx] = (row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < 16; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

#define BM 64
#define BN 64
#define BK 32

// Four consecutive floats of one row, zero past the row's end; one 128-bit load when the row
// length is a multiple of 4 (then rows, and so the quad, start on 16-byte boundaries).
__device__ __forceinline__ float4 load_quad(const float* __restrict__ base, int row, int rows,
                                            int col, int cols, bool vector) {
    if (row >= rows) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float* p = base + (size_t)row * cols + col;
    if (vector && col + 3 < cols) return *reinterpret_cast<const float4*>(p);
    return make_float4(col < cols ? p[0] : 0.0f, col + 1 < cols ? p[1] : 0.0f,
                       col + 2 < cols ? p[2] : 0.0f, col + 3 < cols ? p[3] : 0.0f);
}

extern "C" __global__ void matmul_reg4x4(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM];  // the A tile, transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];
    const int tx = threadIdx.x, ty = threadIdx.y;  // 16 x 16 threads
    const int tid = ty * 16 + tx;
    const int block_row = blockIdx.y * BM, block_col = blockIdx.x * BN;
    const bool a_vector = (K & 3) == 0, b_vector = (N & 3) == 0;
    float acc[4][4] = {};

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int q = tid; q < BM * BK / 4; q += 256) {  // 64 rows x 8 quads of A
            const int m = q / (BK / 4), k = (q % (BK / 4)) * 4;
            const float4 v = load_quad(A, block_row + m, M, k0 + k, K, a_vector);
            As[k][m] = v.x;
            As[k + 1][m] = v.y;
            As[k + 2][m] = v.z;
            As[k + 3][m] = v.w;
        }
        for (int q = tid; q < BK * BN / 4; q += 256) {  // 32 rows x 16 quads of B
            const int k = q / (BN / 4), n = (q % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[k][n]) = load_quad(B, k0 + k, K, block_col + n, N, b_vector);
        }
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
            const float4 b = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
            const float av[4] = {a.x, a.y, a.z, a.w};
            const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
        const int gm = block_row + ty * 4 + i;
        for (int j = 0; j < 4; ++j) {
            const int gn = block_col + tx * 4 + j;
            if (gm < M && gn < N) C[(size_t)gm * N + gn] = acc[i][j];
        }
    }
}

// matmul_tiled: warp-tiled and multi-stage, the operand tiles copied global -> shared by
// cp.async (sm_80+) while the previous tile is multiplied. Tile sizes are compile-time
// constants set by -D options built from the layout's parameters (defaults below):
//   MM_BM x MM_BN  block tile of C; MM_BK  contraction step; MM_STAGES  shared-memory stages;
//   MM_WM x MM_WN  warp tile; MM_TM x MM_TN  thread sub-tile, repeated MM_WNITER times along n
//   (and as often along m as the warp tile needs) so that a warp's 32 lanes cover it;
//   MM_MIN_BLOCKS  blocks per multiprocessor asked of the register allocator (__launch_bounds__).
// A is staged transposed (As[k][m], 4-byte copies, rows padded by 4 floats so the copies of
// one warp spread over the banks), B as is (16-byte copies when N is a multiple of 4). Per k a
// thread reads its A and B fragments as 16-byte quads and does TM x TN x iterations FMAs.
// Out-of-range elements are zero-filled by the copy (source size 0) and outputs not stored.
#ifndef MM_BM
#define MM_BM 128
#endif
#ifndef MM_BN
#define MM_BN 128
#endif
#ifndef MM_BK
#define MM_BK 16
#endif
#ifndef MM_WM
#define MM_WM 64
#endif
#ifndef MM_WN
#define MM_WN 32
#endif
#ifndef MM_TM
#define MM_TM 8
#endif
#ifndef MM_TN
#define MM_TN 4
#endif
#ifndef MM_WNITER
#define MM_WNITER 2
#endif
#ifndef MM_STAGES
#define MM_STAGES 2
#endif
#ifndef MM_MIN_BLOCKS
#define MM_MIN_BLOCKS 1
#endif
#define MM_THREADS ((MM_BM / MM_WM) * (MM_BN / MM_WN) * 32)
#define MM_WMITER ((MM_WM * MM_WN) / (32 * MM_TM * MM_TN * MM_WNITER))
#define MM_WSUBM (MM_WM / MM_WMITER)
#define MM_WSUBN (MM_WN / MM_WNITER)
#define MM_A_STRIDE (MM_BM + 4)
static_assert(MM_BM % MM_WM == 0 && MM_BN % MM_WN == 0, "the warp tile must divide the block tile");
static_assert(MM_THREADS <= 1024, "at most 1024 threads per block");
static_assert(MM_WMITER >= 1 && MM_WM % MM_WMITER == 0 && MM_WN % MM_WNITER == 0, "the iterations must divide the warp tile");
static_assert((MM_WSUBM / MM_TM) * (MM_WSUBN / MM_TN) == 32, "a warp's 32 lanes must cover one warp sub-tile");
static_assert(MM_TM % 4 == 0 && MM_TN % 4 == 0, "thread tiles are read as 16-byte quads");
static_assert((MM_BM * MM_BK) % MM_THREADS == 0 && (MM_BK * MM_BN) % (4 * MM_THREADS) == 0, "loads must split evenly");
static_assert(MM_STAGES >= 2, "at least two stages");
static_assert(MM_STAGES * MM_BK * (MM_A_STRIDE + MM_BN) * 4 <= 48 * 1024, "static shared memory is limited to 48 KB");

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
    unsigned address;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(pointer));
    return address;
}

// Copies `bytes` (4 or 16) from global to shared memory asynchronously; copies zeros when !valid.
__device__ __forceinline__ void copy_async4(float* shared, const float* global, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(shared)), "l"(global),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void copy_async16(float* shared, const float* global, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)), "l"(global),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int pending>
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(pending)); }

extern "C" __global__ void __launch_bounds__(MM_THREADS, MM_MIN_BLOCKS) matmul_tiled(const float* __restrict__ A,
                                                                      const float* __restrict__ B,
                                                                      float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[MM_STAGES][MM_BK][MM_A_STRIDE];
    __shared__ __align__(16) float Bs[MM_STAGES][MM_BK][MM_BN];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_n = warp % (MM_BN / MM_WN), warp_m = warp / (MM_BN / MM_WN);
    const int lane_n = lane % (MM_WSUBN / MM_TN), lane_m = lane / (MM_WSUBN / MM_TN);
    const int block_row = blockIdx.y * MM_BM, block_col = blockIdx.x * MM_BN;
    const bool b_vector = (N & 3) == 0 && (reinterpret_cast<unsigned long long>(B) & 15) == 0;

    // Element e = tid + THREADS l of the A tile is (m e / BK, k e % BK): a warp reads rows in
    // runs of BK floats. Quad q of the B tile is (k q / (BN / 4), n 4 (q % (BN / 4))).
    auto load_tile = [&](int tile, int stage) {
        const int k0 = tile * MM_BK;
#pragma unroll
        for (int l = 0; l < MM_BM * MM_BK / MM_THREADS; ++l) {
            const int e = tid + l * MM_THREADS;
            const int m = e / MM_BK, k = e % MM_BK;
            const bool valid = block_row + m < M && k0 + k < K;
            copy_async4(&As[stage][k][m], valid ? A + (size_t)(block_row + m) * K + k0 + k : A, valid);
        }
#pragma unroll
        for (int l = 0; l < MM_BK * MM_BN / 4 / MM_THREADS; ++l) {
            const int q = tid + l * MM_THREADS;
            const int k = q / (MM_BN / 4), n = (q % (MM_BN / 4)) * 4;
            const int row = k0 + k, col = block_col + n;
            if (b_vector) {
                const bool valid = row < K && col < N;
                copy_async16(&Bs[stage][k][n], valid ? B + (size_t)row * N + col : B, valid);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool valid = row < K && col + e < N;
                    copy_async4(&Bs[stage][k][n + e], valid ? B + (size_t)row * N + col + e : B, valid);
                }
            }
        }
    };

    float acc[MM_WMITER * MM_TM][MM_WNITER * MM_TN] = {};
    const int tiles = (K + MM_BK - 1) / MM_BK;
#pragma unroll
    for (int s = 0; s < MM_STAGES - 1; ++s) {
        if (s < tiles) load_tile(s, s);
        copy_async_commit();
    }
    for (int t = 0; t < tiles; ++t) {
        const int ahead = t + MM_STAGES - 1;
        if (ahead < tiles) load_tile(ahead, ahead % MM_STAGES);
        copy_async_commit();  // possibly empty, so that the count of pending groups is fixed
        copy_async_wait<MM_STAGES - 1>();  // tile t has landed (this thread's copies)
        __syncthreads();                   // ... and every other thread's
        const int stage = t % MM_STAGES;
#pragma unroll
        for (int kk = 0; kk < MM_BK; ++kk) {
            float a_reg[MM_WMITER * MM_TM], b_reg[MM_WNITER * MM_TN];
#pragma unroll
            for (int wm = 0; wm < MM_WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < MM_TM; i += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(
                        &As[stage][kk][warp_m * MM_WM + wm * MM_WSUBM + lane_m * MM_TM + i]);
                    a_reg[wm * MM_TM + i] = v.x;
                    a_reg[wm * MM_TM + i + 1] = v.y;
                    a_reg[wm * MM_TM + i + 2] = v.z;
                    a_reg[wm * MM_TM + i + 3] = v.w;
                }
#pragma unroll
            for (int wn = 0; wn < MM_WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < MM_TN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(
                        &Bs[stage][kk][warp_n * MM_WN + wn * MM_WSUBN + lane_n * MM_TN + j]);
                    b_reg[wn * MM_TN + j] = v.x;
                    b_reg[wn * MM_TN + j + 1] = v.y;
                    b_reg[wn * MM_TN + j + 2] = v.z;
                    b_reg[wn * MM_TN + j + 3] = v.w;
                }
#pragma unroll
            for (int m = 0; m < MM_WMITER * MM_TM; ++m)
#pragma unroll
                for (int n = 0; n < MM_WNITER * MM_TN; ++n) acc[m][n] += a_reg[m] * b_reg[n];
        }
        __syncthreads();  // this stage is refilled by a later iteration's copies
    }
    copy_async_wait<0>();

    const bool c_vector = (N & 3) == 0 && (reinterpret_cast<unsigned long long>(C) & 15) == 0;
#pragma unroll
    for (int wm = 0; wm < MM_WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < MM_TM; ++i) {
            const int row = block_row + warp_m * MM_WM + wm * MM_WSUBM + lane_m * MM_TM + i;
            if (row >= M) continue;
#pragma unroll
            for (int wn = 0; wn < MM_WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < MM_TN; j += 4) {
                    const int col = block_col + warp_n * MM_WN + wn * MM_WSUBN + lane_n * MM_TN + j;
                    const float* v = &acc[wm * MM_TM + i][wn * MM_TN + j];
                    float* out = C + (size_t)row * N + col;
                    if (c_vector && col < N) {
                        *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            if (col + e < N) out[e] = v[e];
                    }
                }
        }
}

// matmul_simt: FP32 SIMT tuned for issue slots (an FFMA nearly every cycle), sm_80+. Parameters:
//   MS_BM x MS_BN  block tile; MS_BK (a multiple of 8) contraction step; MS_STAGES cp.async stages;
//   MS_WM x MS_WN  warp tile, its 32 lanes a 4 (m) x 8 (n) grid, each lane owning (MS_WM / 16) x
//   (MS_WN / 32) sub-tiles of 4 x 4 outputs, 16 rows and 32 columns apart, so that each 16-byte
//   fragment read of a warp touches 4 (A) or 8 (B) consecutive quads: no bank conflict;
//   MS_GROUP  blocks numbered down bands of MS_GROUP block rows (L2 reuse);
//   MS_MIN_BLOCKS  __launch_bounds__ occupancy (the spec derives it from the register tile).
// One barrier per k step: after it, the stage every thread finished reading in the previous step
// is refilled while this step's is read. A is staged transposed (As[k][m], 4-byte copies: a warp
// copies 4 rows x 8 k, conflict-free with rows padded by 4 floats), B as is (16-byte copies when
// N % 4 == 0 and B, C are 16-byte aligned, else 4-byte ones). The copies' addresses are set up
// once: rows past M read row M - 1 with zero bytes, and full k steps check nothing else; the
// last partial step also checks k.
#ifndef MS_BM
#define MS_BM 128
#endif
#ifndef MS_BN
#define MS_BN 128
#endif
#ifndef MS_BK
#define MS_BK 8
#endif
#ifndef MS_WM
#define MS_WM 32
#endif
#ifndef MS_WN
#define MS_WN 64
#endif
#ifndef MS_STAGES
#define MS_STAGES 3
#endif
#ifndef MS_GROUP
#define MS_GROUP 8
#endif
#ifndef MS_MIN_BLOCKS
#define MS_MIN_BLOCKS 2
#endif
#define MS_THREADS ((MS_BM / MS_WM) * (MS_BN / MS_WN) * 32)
#define MS_TM (MS_WM / 4)  // rows per thread: MS_TM / 4 sub-tiles
#define MS_TN (MS_WN / 8)  // columns per thread: MS_TN / 4 sub-tiles
#define MS_AS (MS_BM + 4)  // row stride of the transposed A tile
#define MS_A_COPIES (MS_BM * MS_BK / MS_THREADS)
#define MS_B_COPIES (MS_BK * MS_BN / 4 / MS_THREADS)
#define MS_B_ROWS (MS_THREADS / (MS_BN / 4))  // B rows one round of copies covers
static_assert(MS_BM % MS_WM == 0 && MS_BN % MS_WN == 0 && MS_WM % 16 == 0 && MS_WN % 32 == 0, "warp tiles of 4 x 4 sub-tiles");
static_assert(MS_THREADS <= 1024 && MS_BK % 8 == 0, "at most 1024 threads; k steps of 8s");
static_assert((8 * MS_BM) % MS_THREADS == 0 && MS_A_COPIES >= 1, "A copies: each thread one k column, rows apart");
static_assert(MS_THREADS % (MS_BN / 4) == 0 && MS_B_COPIES >= 1 && (MS_BK * MS_BN / 4) % MS_THREADS == 0, "B copies");
static_assert(MS_STAGES >= 2 && MS_STAGES * MS_BK * (MS_AS + MS_BN) * 4 <= 48 * 1024, "2+ stages in 48 KB");

template <int bytes>
__device__ __forceinline__ void copy_async_to(unsigned shared, const float* global, bool valid) {
    if (bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global), "r"(valid ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared), "l"(global), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ float quad_part(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

template <bool VEC>
__device__ __forceinline__ void simt_body(const float* __restrict__ A, const float* __restrict__ B,
                                          float* __restrict__ C, int M, int N, int K, int block_row, int block_col,
                                          float (*As)[MS_BK][MS_AS], float (*Bs)[MS_BK][MS_BN]) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // A copy l of this thread: tile row a_m + A_ROW(l), column a_k + A_COL(l).
#define A_ROW(l) ((((l) * MS_THREADS) % (8 * MS_BM)) / 8)
#define A_COL(l) (8 * (((l) * MS_THREADS) / (8 * MS_BM)))
    const int a_m = tid >> 3, a_k = tid & 7;
    const int a_k_end = K - a_k;  // copies at column k0 + A_COL(l) + a_k are inside A when k0 + A_COL(l) < a_k_end
    const float* a_src[MS_A_COPIES];
    bool a_ok[MS_A_COPIES];
#pragma unroll
    for (int l = 0; l < MS_A_COPIES; ++l) {
        const int row = block_row + a_m + A_ROW(l);
        a_ok[l] = row < M;
        a_src[l] = A + (size_t)min(row, M - 1) * K + a_k + A_COL(l);
    }
    // B copy l: tile row b_k + l * B_ROWS, columns b_n .. b_n + 3.
    const int b_k = tid / (MS_BN / 4), b_n = (tid % (MS_BN / 4)) * 4;
    const int b_col = block_col + b_n;
    const int b_have = N - b_col;  // columns of this thread's quad inside B (the scalar path's check)
    const bool b_ok = b_have > 0;
    const float* b_src = B + (size_t)b_k * N + (b_col < N ? b_col : 0);
    const size_t b_step = (size_t)MS_B_ROWS * N;
    const unsigned a_dst = shared_address(&As[0][a_k][a_m]), b_dst = shared_address(&Bs[0][b_k][b_n]);
    constexpr unsigned a_stage = MS_BK * MS_AS * 4, b_stage = MS_BK * MS_BN * 4;

    auto load_tile = [&](int k0, int stage) {
        const unsigned a_to = a_dst + stage * a_stage, b_to = b_dst + stage * b_stage;
        if (k0 + MS_BK <= K) {  // the same for every thread: only rows and columns to check
#pragma unroll
            for (int l = 0; l < MS_A_COPIES; ++l)
                copy_async_to<4>(a_to + (A_COL(l) * MS_AS + A_ROW(l)) * 4, a_src[l] + k0, a_ok[l]);
#pragma unroll
            for (int l = 0; l < MS_B_COPIES; ++l) {
                const float* src = b_src + (size_t)k0 * N + l * b_step;
                if (VEC) {
                    copy_async_to<16>(b_to + l * MS_B_ROWS * MS_BN * 4, src, b_ok);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)  // src is in range: column b_col, or 0 past N
                        copy_async_to<4>(b_to + (l * MS_B_ROWS * MS_BN + e) * 4, src + (e < b_have ? e : 0), e < b_have);
                }
            }
        } else {  // the last, partial k step: k checked too, past-the-end copies read B or A's start
#pragma unroll
            for (int l = 0; l < MS_A_COPIES; ++l) {
                const bool valid = a_ok[l] && k0 + A_COL(l) < a_k_end;
                copy_async_to<4>(a_to + (A_COL(l) * MS_AS + A_ROW(l)) * 4, valid ? a_src[l] + k0 : A, valid);
            }
#pragma unroll
            for (int l = 0; l < MS_B_COPIES; ++l) {
                const bool row_ok = k0 + b_k + l * MS_B_ROWS < K;
                const float* src = b_src + (size_t)k0 * N + l * b_step;
                if (VEC) {
                    copy_async_to<16>(b_to + l * MS_B_ROWS * MS_BN * 4, row_ok && b_ok ? src : B, row_ok && b_ok);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const bool valid = row_ok && e < b_have;
                        copy_async_to<4>(b_to + (l * MS_B_ROWS * MS_BN + e) * 4, valid ? src + e : B, valid);
                    }
                }
            }
        }
    };
#undef A_ROW
#undef A_COL

    float acc[MS_TM][MS_TN];
#pragma unroll
    for (int i = 0; i < MS_TM; ++i)
#pragma unroll
        for (int j = 0; j < MS_TN; ++j) acc[i][j] = 0.0f;
    const int tiles = (K + MS_BK - 1) / MS_BK;
#pragma unroll
    for (int s = 0; s < MS_STAGES - 1; ++s) {
        if (s < tiles) load_tile(s * MS_BK, s);
        copy_async_commit();
    }
    const int a_frag = (warp / (MS_BN / MS_WN)) * MS_WM + (lane >> 3) * 4;
    const int b_frag = (warp % (MS_BN / MS_WN)) * MS_WN + (lane & 7) * 4;
    int read = 0, write = MS_STAGES - 1;
    for (int t = 0; t < tiles; ++t) {
        copy_async_wait<MS_STAGES - 2>();  // tile t's copies of this thread have landed
        __syncthreads();  // ... and every thread's; and every thread is done reading tile t - 1
        if (t + MS_STAGES - 1 < tiles) load_tile((t + MS_STAGES - 1) * MS_BK, write);
        copy_async_commit();  // possibly empty: the count of pending groups stays fixed
        const float* as = &As[read][0][a_frag];
        const float* bs = &Bs[read][0][b_frag];
#pragma unroll
        for (int kk = 0; kk < MS_BK; ++kk) {
            float4 a[MS_TM / 4], b[MS_TN / 4];
#pragma unroll
            for (int s = 0; s < MS_TM / 4; ++s) a[s] = *reinterpret_cast<const float4*>(as + kk * MS_AS + 16 * s);
#pragma unroll
            for (int s = 0; s < MS_TN / 4; ++s) b[s] = *reinterpret_cast<const float4*>(bs + kk * MS_BN + 32 * s);
#pragma unroll
            for (int i = 0; i < MS_TM; ++i)
#pragma unroll
                for (int j = 0; j < MS_TN; ++j)
                    acc[i][j] = fmaf(quad_part(a[i / 4], i % 4), quad_part(b[j / 4], j % 4), acc[i][j]);
        }
        read = read + 1 == MS_STAGES ? 0 : read + 1;
        write = write + 1 == MS_STAGES ? 0 : write + 1;
    }
    copy_async_wait<0>();

#pragma unroll
    for (int i = 0; i < MS_TM; ++i) {
        const int row = block_row + a_frag + 16 * (i / 4) + i % 4;
        if (row > M - 1) break;  // the rows of a sub-tile increase
#pragma unroll
        for (int s = 0; s < MS_TN / 4; ++s) {
            const int col = block_col + b_frag + 32 * s;
            float* out = C + (size_t)row * N + col;
            if (VEC) {
                if (col < N) *reinterpret_cast<float4*>(out) = make_float4(acc[i][4 * s], acc[i][4 * s + 1], acc[i][4 * s + 2], acc[i][4 * s + 3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col + e < N) out[e] = acc[i][4 * s + e];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(MS_THREADS, MS_MIN_BLOCKS) matmul_simt(const float* __restrict__ A,
                                                                    const float* __restrict__ B,
                                                                    float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[MS_STAGES][MS_BK][MS_AS];
    __shared__ __align__(16) float Bs[MS_STAGES][MS_BK][MS_BN];
    // Block b of the grid (row-major) takes the tile at band b / (GROUP * columns), walking
    // down the band's GROUP block rows first, then across its columns.
    const int columns = gridDim.x, band_blocks = MS_GROUP * columns;
    const int b = blockIdx.y * columns + blockIdx.x, first = b / band_blocks * MS_GROUP;
    const int rows = min(MS_GROUP, (int)gridDim.y - first), local = b % band_blocks;
    const int block_row = (first + local % rows) * MS_BM, block_col = local / rows * MS_BN;
    const bool vec = (N & 3) == 0 && ((reinterpret_cast<unsigned long long>(B) | reinterpret_cast<unsigned long long>(C)) & 15) == 0;
    if (vec)
        simt_body<true>(A, B, C, M, N, K, block_row, block_col, As, Bs);
    else
        simt_body<false>(A, B, C, M, N, K, block_row, block_col, As, Bs);
}
