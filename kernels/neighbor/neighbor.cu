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
