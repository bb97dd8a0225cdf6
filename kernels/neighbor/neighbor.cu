// Neighbor aggregation: out[i, f] = sum over j in N(i) of x[j, f], graph in CSR form
// (indptr has nodes + 1 entries, indices the neighbours). FP32 features, one thread per output.
extern "C" __global__ void neighbor_sum(const float* __restrict__ x,
                                        const int* __restrict__ indptr,
                                        const int* __restrict__ indices,
                                        float* __restrict__ out,
                                        int nodes, int features) {
    const long long index = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (long long)nodes * features) return;
    const int node = (int)(index / features);
    const int f = (int)(index % features);
    float sum = 0.0f;
    for (int e = indptr[node]; e < indptr[node + 1]; ++e) {
        sum += x[(long long)indices[e] * features + f];
    }
    out[index] = sum;
}

// neighbor_warp_vec: a warp per node (CSR row). The warp reads up to 32 of the node's edge
// indices in one coalesced load and broadcasts them by shuffles; each lane then owns one
// 16-byte quad of features (128 features: one quad per lane, a 512-byte contiguous row per
// gather), and four neighbour rows are loaded before they are added, so several gathers are
// in flight per warp. Widths that are not a multiple of 4 (or unaligned x, out) take the same
// loop over single floats. The loop over feature chunks covers widths above 32 quads.
__device__ __forceinline__ float plus(float a, float b) { return a + b; }
__device__ __forceinline__ float4 plus(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

template <typename V>
__device__ __forceinline__ void warp_gather_sum(const V* __restrict__ rows, int row_len,
                                                const int* __restrict__ indices, int begin, int end,
                                                V* __restrict__ out_row) {
    const int lane = threadIdx.x & 31;
    for (int f0 = 0; f0 < row_len; f0 += 32) {
        const int f = f0 + lane;
        const bool active = f < row_len;
        V acc{};
        for (int e0 = begin; e0 < end; e0 += 32) {
            const int mine = e0 + lane < end ? indices[e0 + lane] : 0;
            const int count = min(32, end - e0);
            int j = 0;
            for (; j + 4 <= count; j += 4) {
                const int n0 = __shfl_sync(0xffffffffu, mine, j), n1 = __shfl_sync(0xffffffffu, mine, j + 1);
                const int n2 = __shfl_sync(0xffffffffu, mine, j + 2), n3 = __shfl_sync(0xffffffffu, mine, j + 3);
                if (active) {
                    const V a = rows[(size_t)n0 * row_len + f], b = rows[(size_t)n1 * row_len + f];
                    const V c = rows[(size_t)n2 * row_len + f], d = rows[(size_t)n3 * row_len + f];
                    acc = plus(acc, plus(plus(a, b), plus(c, d)));
                }
            }
            for (; j < count; ++j) {
                const int n = __shfl_sync(0xffffffffu, mine, j);
                if (active) acc = plus(acc, rows[(size_t)n * row_len + f]);
            }
        }
        if (active) out_row[f] = acc;
    }
}

extern "C" __global__ void neighbor_warp_vec(const float* __restrict__ x,
                                             const int* __restrict__ indptr,
                                             const int* __restrict__ indices,
                                             float* __restrict__ out,
                                             int nodes, int features) {
    const int node = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (node >= nodes) return;  // whole warps leave together, so the shuffles stay full-warp
    const int begin = indptr[node], end = indptr[node + 1];
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out)) & 15) == 0;
    if (aligned && (features & 3) == 0) {
        const int quads = features >> 2;
        warp_gather_sum(reinterpret_cast<const float4*>(x), quads, indices, begin, end,
                        reinterpret_cast<float4*>(out) + (size_t)node * quads);
    } else {
        warp_gather_sum(x, features, indices, begin, end, out + (size_t)node * features);
    }
}

// neighbor_warp_hint: warp_vec's mapping (a warp per node, edge indices read 32 at a time and
// broadcast by shuffles, a 16-byte feature quad per lane) with three changes aimed at L2:
//  - NB_UNROLL rows are gathered before they are added (a pairwise tree), and the 1..UNROLL-1
//    rows left at the end of a batch go as ONE predicated group instead of one by one, so a
//    node of d edges costs about d / UNROLL + 1 round trips to L2 (warp_vec: up to d/4 + 3);
//  - with NB_HINT, the gathers of x carry an L2 evict_last policy while the edge indices are read
//    and out is written with evict-first (streaming) hints: x (n x 512 bytes, 32 MiB at 65536
//    nodes) is what is re-read ~16 times per launch, out and the indices are touched once, and
//    all three together overflow the L2, so x is the one to keep;
//  - the occupancy follows the unroll (the most 256-thread blocks per multiprocessor whose
//    registers hold UNROLL quads without spilling): 2 -> 8 blocks (32 registers), 4 -> 6 (40),
//    8 -> 4 (64), i.e. 128, 192 or 256 rows in flight per multiprocessor (warp_vec: 5 blocks, 160).
// Widths that are not a multiple of 4 (or unaligned x, out) take the same loop over floats.
#ifndef NB_UNROLL
#define NB_UNROLL 4
#endif
#ifndef NB_HINT
#define NB_HINT 1
#endif
#define NB_MIN_BLOCKS (NB_UNROLL == 2 ? 8 : NB_UNROLL == 4 ? 6 : 4)
#define NB_THREADS 256
static_assert(NB_UNROLL == 2 || NB_UNROLL == 4 || NB_UNROLL == 8, "2, 4 or 8 rows per group");

__device__ __forceinline__ float nb_gather(const float* p, unsigned long long policy) {
#if NB_HINT
    float v;
    asm("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy));
    return v;
#else
    return __ldg(p);
#endif
}
__device__ __forceinline__ float4 nb_gather(const float4* p, unsigned long long policy) {
#if NB_HINT
    float4 v;
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    return v;
#else
    return __ldg(p);
#endif
}
__device__ __forceinline__ int nb_index(const int* p) {
#if NB_HINT
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}
template <typename V>
__device__ __forceinline__ void nb_store(V* p, V v) {
#if NB_HINT
    __stcs(p, v);
#else
    *p = v;
#endif
}

template <typename V>
__device__ __forceinline__ V nb_tree(V (&v)[NB_UNROLL]) {
#pragma unroll
    for (int width = NB_UNROLL / 2; width >= 1; width /= 2)
#pragma unroll
        for (int k = 0; k < width; ++k) v[k] = plus(v[2 * k], v[2 * k + 1]);
    return v[0];
}

template <typename V>
__device__ __forceinline__ void nb_gather_sum(const V* __restrict__ rows, int row_len, const int* __restrict__ indices,
                                              int begin, int end, V* __restrict__ out_row,
                                              unsigned long long policy) {
    const int lane = threadIdx.x & 31;
    for (int f0 = 0; f0 < row_len; f0 += 32) {
        const int f = f0 + lane;
        const bool active = f < row_len;
        V acc{};
        for (int e0 = begin; e0 < end; e0 += 32) {
            const int mine = e0 + lane < end ? nb_index(indices + e0 + lane) : 0;
            const int count = end - e0 < 32 ? end - e0 : 32;  // this batch's edges
            int j = 0;
            for (; j + NB_UNROLL <= count; j += NB_UNROLL) {
                V v[NB_UNROLL];
#pragma unroll
                for (int k = 0; k < NB_UNROLL; ++k) {
                    const int node = __shfl_sync(0xffffffffu, mine, j + k);
                    v[k] = active ? nb_gather(rows + (size_t)node * row_len + f, policy) : V{};
                }
                acc = plus(acc, nb_tree(v));
            }
            if (j < count) {  // the batch's last count - j < UNROLL rows, as one predicated group
                V v[NB_UNROLL];
#pragma unroll
                for (int k = 0; k < NB_UNROLL; ++k) {
                    const int node = __shfl_sync(0xffffffffu, mine, j + k);  // j + k <= 31: j <= 32 - UNROLL
                    v[k] = active && j + k < count ? nb_gather(rows + (size_t)node * row_len + f, policy) : V{};
                }
                acc = plus(acc, nb_tree(v));
            }
        }
        if (active) nb_store(out_row + f, acc);
    }
}

extern "C" __global__ void __launch_bounds__(NB_THREADS, NB_MIN_BLOCKS) neighbor_warp_hint(const float* __restrict__ x,
                                                                          const int* __restrict__ indptr,
                                                                          const int* __restrict__ indices,
                                                                          float* __restrict__ out,
                                                                          int nodes, int features) {
    const int node = blockIdx.x * (NB_THREADS >> 5) + (threadIdx.x >> 5);
    if (node >= nodes) return;  // whole warps leave together, so the shuffles stay full-warp
    unsigned long long policy = 0;
#if NB_HINT
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
    const int begin = indptr[node], end = indptr[node + 1];
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out)) & 15) == 0;
    if (aligned && (features & 3) == 0) {
        const int quads = features >> 2;
        nb_gather_sum(reinterpret_cast<const float4*>(x), quads, indices, begin, end,
                      reinterpret_cast<float4*>(out) + (size_t)node * quads, policy);
    } else {
        nb_gather_sum(x, features, indices, begin, end, out + (size_t)node * features, policy);
    }
}

// neighbor_node_split: a block of NS_LANES threads (1, 2 or 4 warps) per node, the node's row split
// between its warps, each lane owning a vector of NS_VEC floats (NS_LANES * NS_VEC = 128 features).
// Why: a block ends with its node, so a multiprocessor holds 64 warps of busy nodes (32 blocks of
// 64 threads, <= 32 registers) instead of blocks of 8 nodes that keep their finished warps until the
// block's slowest node is done (warp_hint: 53% achieved occupancy); twice as many warps gather at once.
//  - each warp owns a contiguous chunk of ceil(row_len / warps) vectors (at 128 features and vec 2: 32
//    float2, one 256-byte piece of every gathered row), walked 32 vectors at a time;
//  - each warp reads its node's edge indices itself, 32 at a time in one coalesced load, and
//    broadcasts them by shuffles (no shared memory, no barrier: the warps of a node never wait
//    for one another);
//  - NS_UNROLL rows are loaded before they are added (a pairwise tree); every group is predicated
//    on the batch's count, so a batch's last count % NS_UNROLL rows are one group padded with zeros;
//  - NB_HINT as in warp_hint (x evict_last in L2, indices and out evict-first).
// Widths that are not a multiple of NS_VEC (or unaligned x, out) take the same walk over floats.
#ifndef NS_LANES
#define NS_LANES 64
#endif
#ifndef NS_UNROLL
#define NS_UNROLL 4
#endif
#define NS_WARPS (NS_LANES / 32)
#define NS_VEC (4 / NS_WARPS)
#define NS_MIN_BLOCKS (NS_LANES == 32 ? 32 : 2048 / NS_LANES)
static_assert(NS_LANES == 32 || NS_LANES == 64 || NS_LANES == 128, "1, 2 or 4 warps per node");
static_assert(NS_UNROLL == 2 || NS_UNROLL == 4, "2 or 4 rows per group");
#if NS_VEC == 4
typedef float4 ns_vec;
#elif NS_VEC == 2
typedef float2 ns_vec;
#else
typedef float ns_vec;
#endif

__device__ __forceinline__ float2 plus(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 nb_gather(const float2* p, unsigned long long policy) {
#if NB_HINT
    float2 v;
    asm("ld.global.nc.L2::cache_hint.v2.f32 {%0, %1}, [%2], %3;" : "=f"(v.x), "=f"(v.y) : "l"(p), "l"(policy));
    return v;
#else
    return __ldg(p);
#endif
}

template <typename V>
__device__ __forceinline__ void ns_gather_sum(const V* __restrict__ rows, int row_len, const int* __restrict__ indices,
                                              int begin, int end, V* __restrict__ out_row,
                                              unsigned long long policy) {
    const int lane = threadIdx.x & 31;
    const int chunk = (row_len + NS_WARPS - 1) / NS_WARPS;  // vectors per warp
    const int first = (threadIdx.x >> 5) * chunk;           // this warp's first vector
    for (int p = 0; p < chunk; p += 32) {                   // warp-uniform, so the shuffles stay full-warp
        const int f = first + p + lane;
        const bool active = p + lane < chunk && f < row_len;
        V acc{};
        for (int e0 = begin; e0 < end; e0 += 32) {
            const int mine = e0 + lane < end ? nb_index(indices + e0 + lane) : 0;
            const int count = end - e0 < 32 ? end - e0 : 32;
            for (int g = 0; g < count; g += NS_UNROLL) {  // g + k <= 31: g <= 32 - NS_UNROLL
                V v[NS_UNROLL];
#pragma unroll
                for (int k = 0; k < NS_UNROLL; ++k) {
                    const int src = __shfl_sync(0xffffffffu, mine, g + k);
                    v[k] = active && g + k < count ? nb_gather(rows + (size_t)src * row_len + f, policy) : V{};
                }
#pragma unroll
                for (int width = NS_UNROLL / 2; width >= 1; width /= 2)
#pragma unroll
                    for (int k = 0; k < width; ++k) v[k] = plus(v[2 * k], v[2 * k + 1]);
                acc = plus(acc, v[0]);
            }
        }
        if (active) nb_store(&out_row[f], acc);
    }
}

extern "C" __global__ void __launch_bounds__(NS_LANES, NS_MIN_BLOCKS) neighbor_node_split(const float* __restrict__ x,
                                                                          const int* __restrict__ indptr,
                                                                          const int* __restrict__ indices,
                                                                          float* __restrict__ out,
                                                                          int nodes, int features) {
    const int node = blockIdx.x;
    if (node >= nodes) return;  // the whole block leaves together
    unsigned long long policy = 0;
#if NB_HINT
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
    const int begin = indptr[node], end = indptr[node + 1];
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out))
                          & (sizeof(ns_vec) - 1)) == 0;
    if (aligned && features % NS_VEC == 0) {
        const int row_len = features / NS_VEC;
        ns_gather_sum(reinterpret_cast<const ns_vec*>(x), row_len, indices, begin, end,
                      reinterpret_cast<ns_vec*>(out) + (size_t)node * row_len, policy);
    } else {
        ns_gather_sum(x, features, indices, begin, end, out + (size_t)node * features, policy);
    }
}
