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

// layernorm_vec: one read of x, the row held in registers, both statistics from the held
// values (the mean, then the centred sum of squares: no cancellation, no second read).
// blockDim.x threads share a row (whole warps, chosen by the launch from the width so the row
// fits in LAYERNORM_VEC quads per thread and up to three scalars); blockDim.x == 32 means a
// warp per row with blockDim.y rows per block, otherwise one row per block, as OneFlow's layer
// norm picks by width. A row is a scalar head up to x's first 16-byte boundary (odd widths misalign rows),
// 128-bit quads and a scalar tail; with x and y rows aligned differently all of it is scalar.
#ifndef LAYERNORM_VEC
#define LAYERNORM_VEC 8
#endif
// The most threads per row the launch may choose: __launch_bounds__ then caps the registers
// at 65536 / LAYERNORM_MAX_THREADS per thread, so that every launch the spec allows can start.
#ifndef LAYERNORM_MAX_THREADS
#define LAYERNORM_MAX_THREADS 512
#endif
// The blocks of LAYERNORM_MAX_THREADS that must fit on an SM at once: above 1, it caps the
// registers lower (and may spill), for more rows in flight per SM (H200, 16384 x 4097: vec's
// 128-thread blocks take 92 registers, five blocks per SM, ~30% occupancy).
#ifndef LAYERNORM_MIN_BLOCKS
#define LAYERNORM_MIN_BLOCKS 1
#endif

__device__ __forceinline__ float row_total(float v, float* warp_partial) {
    for (int lane_mask = 16; lane_mask > 0; lane_mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, lane_mask);
    if (blockDim.x == 32) return v;
    const int warps = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) warp_partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += warp_partial[w];
    __syncthreads();  // warp_partial is written again by the next call
    return total;
}

__device__ __forceinline__ float centred_square(float v, float mean) {
    const float d = v - mean;
    return d * d;
}

extern "C" __global__ void __launch_bounds__(LAYERNORM_MAX_THREADS, LAYERNORM_MIN_BLOCKS) layernorm_vec(const float* __restrict__ x, const float* __restrict__ weight,
                                         const float* __restrict__ bias, float* __restrict__ y,
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
    const int tail_start = head + 4 * quads;
    // One scalar each for the first threads: the vector path's tail, or the scalar path's columns
    // past its 4 * LAYERNORM_VEC * threads register slots (at most 3: the launch sees to it).
    const int rest_start = vector ? tail_start : 4 * LAYERNORM_VEC * threads;
    const int rest = vector ? tail : max(0, cols - rest_start);

    float4 v[LAYERNORM_VEC];
    const float h = tid < head ? x_row[tid] : 0.0f;
    const float t = tid < rest ? x_row[rest_start + tid] : 0.0f;
    if (vector) {
        const float4* x4 = reinterpret_cast<const float4*>(x_row + head);
#pragma unroll
        for (int k = 0; k < LAYERNORM_VEC; ++k) {
            const int q = tid + k * threads;
            v[k] = q < quads ? x4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int k = 0; k < LAYERNORM_VEC; ++k) {
            const int c = 4 * k * threads + tid;
            v[k] = make_float4(c < tail ? x_row[c] : 0.0f, c + threads < tail ? x_row[c + threads] : 0.0f,
                               c + 2 * threads < tail ? x_row[c + 2 * threads] : 0.0f,
                               c + 3 * threads < tail ? x_row[c + 3 * threads] : 0.0f);
        }
    }

    float sum = h + t;
#pragma unroll
    for (int k = 0; k < LAYERNORM_VEC; ++k) sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float mean = row_total(sum, warp_partial) / cols;

    // Only held elements count: an empty slot would add mean^2.
    float squares = (tid < head ? centred_square(h, mean) : 0.0f) + (tid < rest ? centred_square(t, mean) : 0.0f);
    if (vector) {
#pragma unroll
        for (int k = 0; k < LAYERNORM_VEC; ++k) {
            if (tid + k * threads < quads) {
                squares += (centred_square(v[k].x, mean) + centred_square(v[k].y, mean)) +
                           (centred_square(v[k].z, mean) + centred_square(v[k].w, mean));
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < LAYERNORM_VEC; ++k) {
            const float held[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if ((4 * k + j) * threads + tid < tail) squares += centred_square(held[j], mean);
            }
        }
    }
    const float rstd = rsqrtf(row_total(squares, warp_partial) / cols + eps);

    if (tid < head) y_row[tid] = affine(h, mean, rstd, weight[tid], bias[tid]);
    if (tid < rest) y_row[rest_start + tid] = affine(t, mean, rstd, weight[rest_start + tid], bias[rest_start + tid]);
    if (vector) {
        const bool params_vector =
            head == 0 && ((reinterpret_cast<unsigned long long>(weight) | reinterpret_cast<unsigned long long>(bias)) & 15) == 0;
        float4* y4 = reinterpret_cast<float4*>(y_row + head);
#pragma unroll
        for (int k = 0; k < LAYERNORM_VEC; ++k) {
            const int q = tid + k * threads;
            if (q >= quads) break;
            const int c = head + 4 * q;
            const float4 w = params_vector ? reinterpret_cast<const float4*>(weight)[q]
                                           : make_float4(weight[c], weight[c + 1], weight[c + 2], weight[c + 3]);
            const float4 b = params_vector ? reinterpret_cast<const float4*>(bias)[q]
                                           : make_float4(bias[c], bias[c + 1], bias[c + 2], bias[c + 3]);
            y4[q] = make_float4(affine(v[k].x, mean, rstd, w.x, b.x), affine(v[k].y, mean, rstd, w.y, b.y),
                                affine(v[k].z, mean, rstd, w.z, b.z), affine(v[k].w, mean, rstd, w.w, b.w));
        }
    } else {
#pragma unroll
        for (int k = 0; k < LAYERNORM_VEC; ++k) {
            const float held[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = (4 * k + j) * threads + tid;
                if (c < tail) y_row[c] = affine(held[j], mean, rstd, weight[c], bias[c]);
            }
        }
    }
}

// layernorm_stream: vec's one read with the row in registers, plus three changes aimed at the
// wide, odd-width case (16384 x 4097), where vec reads weight and bias as four scalars each per
// quad (rows of odd width are not 16-byte aligned, so a quad's columns are not a weight quad):
//  * weight and bias live in shared memory, loaded once per block (the block walks rows
//    blockIdx.x, blockIdx.x + gridDim.x, ...), in four planes by column mod 4: (w, b) of column
//    c at [(c & 3) * pitch + (c >> 2)]. The 32 lanes of a quad access read one plane at 32
//    consecutive slots (conflict-free 64-bit reads), whatever the row's misalignment.
//  * one reduction per row instead of two: each thread reduces its held values to (count,
//    mean, centred sum of squares), and these merge pairwise (Chan et al.) through the warp's
//    xor shuffles and then across warps; no E[x^2] - mean^2 cancellation. The lower lane is
//    always the first operand, so every lane ends with the same bits. The cross-warp partials
//    are double-buffered by row parity: one barrier per row.
//  * x is read with evict-first loads and y written with streaming stores (no reuse).
// LN_STREAM_THREADS threads per row (the block), LN_STREAM_VEC quads each: a row of up to
// 4 * VEC * THREADS + 3 columns (head and tail are scalars of the first threads).
#ifndef LN_STREAM_THREADS
#define LN_STREAM_THREADS 256
#endif
#ifndef LN_STREAM_VEC
#define LN_STREAM_VEC 4
#endif
#ifndef LN_STREAM_BLOCKS
#define LN_STREAM_BLOCKS 4
#endif
#define LN_STREAM_WARPS (LN_STREAM_THREADS / 32)

struct Moments {
    float n, mean, m2;  // count, mean, sum of squared deviations from the mean
};

// Chan et al.'s pairwise update; either side may be empty (n == 0).
__device__ __forceinline__ Moments merge_moments(Moments a, Moments b) {
    const float n = a.n + b.n;
    if (n == 0.0f) return a;
    const float share = b.n / n;
    const float delta = b.mean - a.mean;
    Moments m;
    m.n = n;
    m.mean = a.mean + delta * share;
    m.m2 = a.m2 + b.m2 + delta * delta * (a.n * share);
    return m;
}

__device__ __forceinline__ float2 stream_param(const float2* params, int pitch, int c) {
    return params[(c & 3) * pitch + (c >> 2)];
}

// Is element (k, j) of a thread's register quads a column of the row? VECTOR: quad
// tid + k * THREADS of the row's aligned body; else column (4k + j) * THREADS + tid.
template <bool VECTOR>
__device__ __forceinline__ bool stream_held(int tid, int k, int j, int quads, int cols) {
    return VECTOR ? tid + k * LN_STREAM_THREADS < quads : (4 * k + j) * LN_STREAM_THREADS + tid < cols;
}

// One row. VECTOR: a scalar head up to x's first 16-byte boundary, quads, a scalar tail
// (x and y rows equally aligned); else every element scalar. The two are separate
// instantiations so that neither path's registers add to the other's.
template <bool VECTOR>
__device__ __forceinline__ void stream_row(const float* __restrict__ x_row, float* __restrict__ y_row, int cols,
                                           int head, const float2* params, int pitch, Moments* warp_moments,
                                           float eps) {
    const int tid = threadIdx.x, lane = tid & 31;
    const int quads = VECTOR ? (cols - head) >> 2 : 0;
    // The scalar slots: on the vector path the head (tid < head) and the tail (t_col < cols);
    // on the scalar path `t` holds column 4 * VEC * THREADS + tid.
    const int t_col = VECTOR ? head + 4 * quads + tid : 4 * LN_STREAM_VEC * LN_STREAM_THREADS + tid;
    const bool has_h = VECTOR && tid < head;
    const bool has_t = t_col < cols;

    float4 v[LN_STREAM_VEC];
    const float h = has_h ? __ldcs(x_row + tid) : 0.0f;
    const float t = has_t ? __ldcs(x_row + t_col) : 0.0f;
#pragma unroll
    for (int k = 0; k < LN_STREAM_VEC; ++k) {
        if (VECTOR) {
            const int q = tid + k * LN_STREAM_THREADS;
            v[k] = q < quads ? __ldcs(reinterpret_cast<const float4*>(x_row + head) + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else {
            float held[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                held[j] = stream_held<false>(tid, k, j, quads, cols) ? x_row[(4 * k + j) * LN_STREAM_THREADS + tid] : 0.0f;
            }
            v[k] = make_float4(held[0], held[1], held[2], held[3]);
        }
    }

    // This thread's moments. Empty slots hold zeros: nothing to the sum, but they must stay
    // out of the count and of the squares.
    float n = (has_h ? 1.0f : 0.0f) + (has_t ? 1.0f : 0.0f);
    float sum = h + t;
#pragma unroll
    for (int k = 0; k < LN_STREAM_VEC; ++k) {
        sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
#pragma unroll
        for (int j = 0; j < 4; ++j) n += stream_held<VECTOR>(tid, k, j, quads, cols) ? 1.0f : 0.0f;
    }
    Moments mine;
    mine.n = n;
    mine.mean = n > 0.0f ? sum / n : 0.0f;
    float m2 = (has_h ? centred_square(h, mine.mean) : 0.0f) + (has_t ? centred_square(t, mine.mean) : 0.0f);
#pragma unroll
    for (int k = 0; k < LN_STREAM_VEC; ++k) {
        const float held[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (stream_held<VECTOR>(tid, k, j, quads, cols)) m2 += centred_square(held[j], mine.mean);
        }
    }
    mine.m2 = m2;
#pragma unroll
    for (int mask = 1; mask < 32; mask <<= 1) {
        Moments other;
        other.n = __shfl_xor_sync(0xffffffffu, mine.n, mask);
        other.mean = __shfl_xor_sync(0xffffffffu, mine.mean, mask);
        other.m2 = __shfl_xor_sync(0xffffffffu, mine.m2, mask);
        const bool upper = (lane & mask) != 0;
        mine = merge_moments(upper ? other : mine, upper ? mine : other);
    }
    if (lane == 0) warp_moments[tid >> 5] = mine;
    __syncthreads();  // this buffer is written again two rows on, after the next row's barrier
    Moments total = warp_moments[0];
#pragma unroll
    for (int w = 1; w < LN_STREAM_WARPS; ++w) total = merge_moments(total, warp_moments[w]);
    const float mean = total.mean;
    const float rstd = rsqrtf(total.m2 / cols + eps);

    if (has_h) {
        const float2 p = stream_param(params, pitch, tid);
        __stcs(y_row + tid, affine(h, mean, rstd, p.x, p.y));
    }
    if (has_t) {
        const float2 p = stream_param(params, pitch, t_col);
        __stcs(y_row + t_col, affine(t, mean, rstd, p.x, p.y));
    }
    if (VECTOR) {
        // Column head + 4q + j sits in plane (head + j) & 3 at slot q + ((head + j) >> 2).
        int plane[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) plane[j] = ((head + j) & 3) * pitch + ((head + j) >> 2);
        float4* y4 = reinterpret_cast<float4*>(y_row + head);
#pragma unroll
        for (int k = 0; k < LN_STREAM_VEC; ++k) {
            const int q = tid + k * LN_STREAM_THREADS;
            if (q < quads) {
                const float2 p0 = params[plane[0] + q], p1 = params[plane[1] + q];
                const float2 p2 = params[plane[2] + q], p3 = params[plane[3] + q];
                __stcs(y4 + q, make_float4(affine(v[k].x, mean, rstd, p0.x, p0.y), affine(v[k].y, mean, rstd, p1.x, p1.y),
                                           affine(v[k].z, mean, rstd, p2.x, p2.y), affine(v[k].w, mean, rstd, p3.x, p3.y)));
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < LN_STREAM_VEC; ++k) {
            const float held[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = (4 * k + j) * LN_STREAM_THREADS + tid;
                if (c < cols) {
                    const float2 p = stream_param(params, pitch, c);
                    y_row[c] = affine(held[j], mean, rstd, p.x, p.y);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(LN_STREAM_THREADS, LN_STREAM_BLOCKS)
layernorm_stream(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                 float* __restrict__ y, int rows, int cols, float eps) {
    extern __shared__ float2 params[];
    __shared__ Moments warp_moments[2][LN_STREAM_WARPS];
    const int pitch = (cols + 3) >> 2;
    for (int c = threadIdx.x; c < cols; c += LN_STREAM_THREADS) {
        params[(c & 3) * pitch + (c >> 2)] = make_float2(weight[c], bias[c]);
    }
    __syncthreads();
    // Every thread of the block walks the same rows, so the path taken (and its barrier) is uniform.
    int parity = 0;
    for (int row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
        const float* x_row = x + (size_t)row * cols;
        float* y_row = y + (size_t)row * cols;
        const unsigned long long x_address = reinterpret_cast<unsigned long long>(x_row);
        if (((x_address ^ reinterpret_cast<unsigned long long>(y_row)) & 15) == 0) {
            const int head = min(cols, (int)(((16 - (x_address & 15)) & 15) >> 2));
            stream_row<true>(x_row, y_row, cols, head, params, pitch, warp_moments[parity], eps);
        } else {
            stream_row<false>(x_row, y_row, cols, 0, params, pitch, warp_moments[parity], eps);
        }
    }
}

// layernorm_pipe: layernorm_stream with the rows software-pipelined. A stream block stops
// loading while it reduces a row, waits at the barrier and stores it, so the DRAM queue of
// its SM drains once per row; here each block holds two rows in registers: the loads of its
// next row (row + gridDim.x) are issued at the start of the current row's step, before its
// moments, barrier, normalisation and stores, and arrive while those run. The two register
// sets alternate (a step on (a, b), then one on (b, a)), so no register is copied, and the
// cross-warp partials alternate with them (one barrier per row, as in stream). Arithmetic and
// merge order are stream's (the same bits). The weight/bias planes are filled plane by plane
// (consecutive lanes write consecutive slots: stream's column-order fill writes four planes
// at once, a 4-way bank conflict) and start on 128-byte boundaries (pitch a multiple of 16).
// LN_PIPE_HINT 1: evict-first x loads and streaming y stores (stream's); 0: plain ones.
// Whether x and y rows are vector-aligned alike does not depend on the row (both advance by
// the same cols * 4 bytes), so the path is chosen once per launch; the head, per row.
#ifndef LN_PIPE_THREADS
#define LN_PIPE_THREADS 256
#endif
#ifndef LN_PIPE_VEC
#define LN_PIPE_VEC 4
#endif
#ifndef LN_PIPE_BLOCKS
#define LN_PIPE_BLOCKS 3
#endif
#ifndef LN_PIPE_HINT
#define LN_PIPE_HINT 0
#endif
#define LN_PIPE_WARPS (LN_PIPE_THREADS / 32)

struct PipeRow {
    float4 v[LN_PIPE_VEC];
    float h, t;  // the scalar slots: head and tail (vector path), column 4 * VEC * THREADS + tid (scalar)
};

template <typename T>
__device__ __forceinline__ T pipe_ld(const T* p) {
#if LN_PIPE_HINT
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void pipe_st(float* p, float v) {
#if LN_PIPE_HINT
    __stcs(p, v);
#else
    *p = v;
#endif
}

__device__ __forceinline__ void pipe_st4(float4* p, float4 v) {
#if LN_PIPE_HINT
    __stcs(p, v);
#else
    *p = v;
#endif
}

// Columns before the row's first 16-byte boundary (vector path only).
template <bool VECTOR>
__device__ __forceinline__ int pipe_head(const float* row_start, int cols) {
    return VECTOR ? min(cols, (int)(((16 - (reinterpret_cast<unsigned long long>(row_start) & 15)) & 15) >> 2)) : 0;
}

// Is element (k, j) of a thread's register quads a column of the row (stream_held's rule)?
template <bool VECTOR>
__device__ __forceinline__ bool pipe_held(int tid, int k, int j, int quads, int cols) {
    return VECTOR ? tid + k * LN_PIPE_THREADS < quads : (4 * k + j) * LN_PIPE_THREADS + tid < cols;
}

template <bool VECTOR>
__device__ __forceinline__ void pipe_load(const float* __restrict__ x_row, int cols, PipeRow& r) {
    const int tid = threadIdx.x;
    const int head = pipe_head<VECTOR>(x_row, cols);
    const int quads = VECTOR ? (cols - head) >> 2 : 0;
    const int t_col = VECTOR ? head + 4 * quads + tid : 4 * LN_PIPE_VEC * LN_PIPE_THREADS + tid;
    r.h = VECTOR && tid < head ? pipe_ld(x_row + tid) : 0.0f;
    r.t = t_col < cols ? pipe_ld(x_row + t_col) : 0.0f;
#pragma unroll
    for (int k = 0; k < LN_PIPE_VEC; ++k) {
        if (VECTOR) {
            const int q = tid + k * LN_PIPE_THREADS;
            r.v[k] = q < quads ? pipe_ld(reinterpret_cast<const float4*>(x_row + head) + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else {
            float held[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                held[j] = pipe_held<false>(tid, k, j, quads, cols) ? x_row[(4 * k + j) * LN_PIPE_THREADS + tid] : 0.0f;
            }
            r.v[k] = make_float4(held[0], held[1], held[2], held[3]);
        }
    }
}

// One row held in `cur` (its head `head`): its moments (stream's order), the barrier, its
// normalised stores; the loads of row `next` into `nxt` go out first.
template <bool VECTOR>
__device__ __forceinline__ void pipe_step(const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                          int row, int next, PipeRow& cur, PipeRow& nxt, const float2* params,
                                          int pitch, Moments* warp_moments, float eps) {
    if (next < rows) pipe_load<VECTOR>(x + (size_t)next * cols, cols, nxt);
    const int tid = threadIdx.x, lane = tid & 31;
    float* y_row = y + (size_t)row * cols;
    const int head = pipe_head<VECTOR>(x + (size_t)row * cols, cols);
    const int quads = VECTOR ? (cols - head) >> 2 : 0;
    const int t_col = VECTOR ? head + 4 * quads + tid : 4 * LN_PIPE_VEC * LN_PIPE_THREADS + tid;
    const bool has_h = VECTOR && tid < head;
    const bool has_t = t_col < cols;

    float n = (has_h ? 1.0f : 0.0f) + (has_t ? 1.0f : 0.0f);
    float sum = cur.h + cur.t;
#pragma unroll
    for (int k = 0; k < LN_PIPE_VEC; ++k) {
        sum += (cur.v[k].x + cur.v[k].y) + (cur.v[k].z + cur.v[k].w);
#pragma unroll
        for (int j = 0; j < 4; ++j) n += pipe_held<VECTOR>(tid, k, j, quads, cols) ? 1.0f : 0.0f;
    }
    Moments mine;
    mine.n = n;
    mine.mean = n > 0.0f ? sum / n : 0.0f;
    float m2 = (has_h ? centred_square(cur.h, mine.mean) : 0.0f) + (has_t ? centred_square(cur.t, mine.mean) : 0.0f);
#pragma unroll
    for (int k = 0; k < LN_PIPE_VEC; ++k) {
        const float held[4] = {cur.v[k].x, cur.v[k].y, cur.v[k].z, cur.v[k].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (pipe_held<VECTOR>(tid, k, j, quads, cols)) m2 += centred_square(held[j], mine.mean);
        }
    }
    mine.m2 = m2;
#pragma unroll
    for (int mask = 1; mask < 32; mask <<= 1) {
        Moments other;
        other.n = __shfl_xor_sync(0xffffffffu, mine.n, mask);
        other.mean = __shfl_xor_sync(0xffffffffu, mine.mean, mask);
        other.m2 = __shfl_xor_sync(0xffffffffu, mine.m2, mask);
        const bool upper = (lane & mask) != 0;
        mine = merge_moments(upper ? other : mine, upper ? mine : other);
    }
    if (lane == 0) warp_moments[tid >> 5] = mine;
    __syncthreads();  // this buffer is written again two rows on, after the next row's barrier
    Moments total = warp_moments[0];
#pragma unroll
    for (int w = 1; w < LN_PIPE_WARPS; ++w) total = merge_moments(total, warp_moments[w]);
    const float mean = total.mean;
    const float rstd = rsqrtf(total.m2 / cols + eps);

    if (has_h) {
        const float2 p = stream_param(params, pitch, tid);
        pipe_st(y_row + tid, affine(cur.h, mean, rstd, p.x, p.y));
    }
    if (has_t) {
        const float2 p = stream_param(params, pitch, t_col);
        pipe_st(y_row + t_col, affine(cur.t, mean, rstd, p.x, p.y));
    }
    if (VECTOR) {
        // Column head + 4q + j: plane (head + j) & 3, slot q + ((head + j) >> 2).
        int slot[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) slot[j] = ((head + j) & 3) * pitch + ((head + j) >> 2);
        float4* y4 = reinterpret_cast<float4*>(y_row + head);
#pragma unroll
        for (int k = 0; k < LN_PIPE_VEC; ++k) {
            const int q = tid + k * LN_PIPE_THREADS;
            if (q < quads) {
                const float2 p0 = params[slot[0] + q], p1 = params[slot[1] + q];
                const float2 p2 = params[slot[2] + q], p3 = params[slot[3] + q];
                const float4 v = cur.v[k];
                pipe_st4(y4 + q, make_float4(affine(v.x, mean, rstd, p0.x, p0.y), affine(v.y, mean, rstd, p1.x, p1.y),
                                             affine(v.z, mean, rstd, p2.x, p2.y), affine(v.w, mean, rstd, p3.x, p3.y)));
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < LN_PIPE_VEC; ++k) {
            const float held[4] = {cur.v[k].x, cur.v[k].y, cur.v[k].z, cur.v[k].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = (4 * k + j) * LN_PIPE_THREADS + tid;
                if (c < cols) {
                    const float2 p = stream_param(params, pitch, c);
                    y_row[c] = affine(held[j], mean, rstd, p.x, p.y);
                }
            }
        }
    }
}

// The block's rows blockIdx.x + i * gridDim.x, two per trip: (a, b) then (b, a).
template <bool VECTOR>
__device__ __forceinline__ void pipe_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                          const float2* params, int pitch, Moments (*warp_moments)[LN_PIPE_WARPS],
                                          float eps) {
    PipeRow a, b;
    const int stride = gridDim.x;
    if (blockIdx.x < rows) pipe_load<VECTOR>(x + (size_t)blockIdx.x * cols, cols, a);
    for (int row = blockIdx.x; row < rows; row += 2 * stride) {
        pipe_step<VECTOR>(x, y, rows, cols, row, row + stride, a, b, params, pitch, warp_moments[0], eps);
        if (row + stride >= rows) break;
        pipe_step<VECTOR>(x, y, rows, cols, row + stride, row + 2 * stride, b, a, params, pitch, warp_moments[1], eps);
    }
}

extern "C" __global__ void __launch_bounds__(LN_PIPE_THREADS, LN_PIPE_BLOCKS)
layernorm_pipe(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
               float* __restrict__ y, int rows, int cols, float eps) {
    extern __shared__ float2 params[];
    __shared__ Moments warp_moments[2][LN_PIPE_WARPS];
    const int pitch = (((cols + 3) >> 2) + 15) & ~15;  // planes on 128-byte boundaries
    for (int plane = 0; plane < 4; ++plane) {
        for (int s = threadIdx.x; 4 * s + plane < cols; s += LN_PIPE_THREADS) {
            params[plane * pitch + s] = make_float2(weight[4 * s + plane], bias[4 * s + plane]);
        }
    }
    __syncthreads();
    // Uniform over the block (and the launch): x and y rows are vector-aligned alike or never.
    if (((reinterpret_cast<unsigned long long>(x) ^ reinterpret_cast<unsigned long long>(y)) & 15) == 0) {
        pipe_rows<true>(x, y, rows, cols, params, pitch, warp_moments, eps);
    } else {
        pipe_rows<false>(x, y, rows, cols, params, pitch, warp_moments, eps);
    }
}
