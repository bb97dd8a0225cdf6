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
