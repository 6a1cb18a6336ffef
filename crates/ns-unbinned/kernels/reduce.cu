// The extended mixture NLL from per-event log-probabilities (reduce/mod.rs has the formula and
// the CPU reference): per dataset (toy) and block, Σ w ln S and Σ w fₚ/S over the block's
// events, reduced over the block in a fixed tree (mixture_partials); then per dataset the
// blocks' partials in a fixed order and tree (mixture_finish). No atomics: a launch over the
// same inputs gives the same bits, and a dataset's block count depends on its event count
// only, so its sums are the same in any batch.
//
// Log-probabilities are process-major (row q: every event's ln f_q), f64 or f32 (the latter
// straight from a PyTorch tensor or ONNX Runtime's output); sums are kept in f64.

#if !defined(NS_P) || !defined(NS_BLOCK) || !defined(NS_EVENTS_PER_THREAD)
#error "compile with reduce/cuda.rs's defines: NS_P, NS_BLOCK, NS_EVENTS_PER_THREAD"
#endif

__device__ __forceinline__ void block_sum(double* red, double v, double* out) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int stride = NS_BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = red[0];
    __syncthreads();
}

template <typename T>
__device__ void partials(const T* logp, long long row, const long long* offsets,
                         const double* yields, const double* weights, double* out) {
    __shared__ double red[NS_BLOCK];
    const int t = blockIdx.y;
    const long long lo = offsets[t], n = offsets[t + 1] - lo;
    const long long per_block = (long long)NS_BLOCK * NS_EVENTS_PER_THREAD;
    const long long blocks = min((long long)gridDim.x, max(1LL, (n + per_block - 1) / per_block));
    double* o = out + ((long long)t * gridDim.x + blockIdx.x) * (NS_P + 1);
    if (blockIdx.x >= blocks) {
        for (int s = threadIdx.x; s <= NS_P; s += NS_BLOCK) o[s] = 0.0;
        return;
    }
    double nu[NS_P];
    #pragma unroll
    for (int q = 0; q < NS_P; q++) nu[q] = yields[t * NS_P + q];
    double acc[NS_P + 1];
    #pragma unroll
    for (int s = 0; s <= NS_P; s++) acc[s] = 0.0;
    for (long long e = (long long)blockIdx.x * NS_BLOCK + threadIdx.x; e < n; e += blocks * NS_BLOCK) {
        const long long g = lo + e;
        double l[NS_P];
        double m = -__longlong_as_double(0x7ff0000000000000LL);
        #pragma unroll
        for (int q = 0; q < NS_P; q++) {
            l[q] = (double)logp[q * row + g];
            m = fmax(m, l[q]);
        }
        double s = 0.0;
        #pragma unroll
        for (int q = 0; q < NS_P; q++) {
            l[q] = exp(l[q] - m);
            s += nu[q] * l[q];
        }
        const double w = weights ? weights[g] : 1.0;
        acc[0] += w * (m + log(s));
        const double ws = w / s;
        #pragma unroll
        for (int q = 0; q < NS_P; q++) acc[1 + q] += ws * l[q];
    }
    #pragma unroll
    for (int s = 0; s <= NS_P; s++) block_sum(red, acc[s], o + s);
}

extern "C" __global__ void __launch_bounds__(NS_BLOCK) mixture_partials_f64(
    const double* logp, long long row, const long long* offsets, const double* yields,
    const double* weights, double* out) {
    partials<double>(logp, row, offsets, yields, weights, out);
}

extern "C" __global__ void __launch_bounds__(NS_BLOCK) mixture_partials_f32(
    const float* logp, long long row, const long long* offsets, const double* yields,
    const double* weights, double* out) {
    partials<float>(logp, row, offsets, yields, weights, out);
}

// One block per dataset: thread i adds blocks i, i + NS_BLOCK, … in order, then the tree.
extern "C" __global__ void __launch_bounds__(NS_BLOCK) mixture_finish(
    const double* partials, int blocks, double* sums) {
    __shared__ double red[NS_BLOCK];
    const int t = blockIdx.x;
    const double* p = partials + (long long)t * blocks * (NS_P + 1);
    for (int s = 0; s <= NS_P; s++) {
        double v = 0.0;
        for (int b = threadIdx.x; b < blocks; b += NS_BLOCK) v += p[(long long)b * (NS_P + 1) + s];
        block_sum(red, v, sums + (long long)t * (NS_P + 1) + s);
    }
}
