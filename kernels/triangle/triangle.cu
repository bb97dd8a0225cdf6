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
