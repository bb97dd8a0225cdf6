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
