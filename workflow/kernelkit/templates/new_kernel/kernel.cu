// NEWKERNEL: y = scale * x over n FP32 elements, one grid-stride loop.
// Written by `kernelkit new` as a starting point: a memory-bound kernel that reads and writes
// each element once. Change it, and keep spec.py (reference, controls, layouts) and
// emulation.py (the same arithmetic in NumPy float32) in step with it.
extern "C" __global__ void NEWKERNEL(const float* __restrict__ x,
                                     const float* __restrict__ scale,
                                     float* __restrict__ y,
                                     long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = scale[0] * x[i];
    }
}
