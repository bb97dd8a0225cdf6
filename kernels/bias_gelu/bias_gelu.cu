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
