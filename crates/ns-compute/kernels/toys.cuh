// CUDA twin of src/rng.rs: Philox4x32-10 streams and the samplers, in the same order of
// operations, so toy i of stream s and seed k is the same dataset as on the CPU.

struct NsToyStream {
    unsigned key0, key1, toy, stream;
    unsigned long long block;
    unsigned buffer[4];
    int used;
};

__device__ void ns_philox4x32(const unsigned counter[4], unsigned key0, unsigned key1, unsigned out[4]) {
    unsigned c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    unsigned k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;
        unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;
        unsigned n0 = ((unsigned)(p1 >> 32)) ^ c1 ^ k0;
        unsigned n1 = (unsigned)p1;
        unsigned n2 = ((unsigned)(p0 >> 32)) ^ c3 ^ k1;
        unsigned n3 = (unsigned)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

__device__ void ns_stream_init(NsToyStream* s, unsigned long long seed, unsigned stream, unsigned toy) {
    s->key0 = (unsigned)seed;
    s->key1 = (unsigned)(seed >> 32);
    s->toy = toy;
    s->stream = stream;
    s->block = 0;
    s->used = 4;
}

__device__ unsigned ns_next_u32(NsToyStream* s) {
    if (s->used == 4) {
        unsigned counter[4] = {(unsigned)s->block, (unsigned)(s->block >> 32), s->toy, s->stream};
        ns_philox4x32(counter, s->key0, s->key1, s->buffer);
        s->block += 1;
        s->used = 0;
    }
    s->used += 1;
    return s->buffer[s->used - 1];
}

__device__ double ns_uniform(NsToyStream* s) {
    unsigned long long hi = (unsigned long long)(ns_next_u32(s) >> 5);
    unsigned long long lo = (unsigned long long)(ns_next_u32(s) >> 6);
    unsigned long long bits = (hi << 26) | lo;
    return ((double)bits + 0.5) / 9007199254740992.0;
}

__device__ double ns_normal(NsToyStream* s) {
    double u = ns_uniform(s);
    double v = ns_uniform(s);
    return sqrt(-2.0 * ns_ln(u)) * ns_cos_2pi(v);
}

// rng.rs's truncated_normal.
__device__ double ns_truncated_normal(NsToyStream* s, double mean, double sigma, double low, double high) {
    for (int i = 0; i < NS_MAX_REJECTIONS; ++i) {
        double x = mean + sigma * ns_normal(s);
        if (x >= low && x <= high) return x;
    }
    return fmin(fmax(mean, low), high);
}

// rng.rs's bifurcated_normal: a uniform picks the side, then |N(0, 1)|.
__device__ double ns_bifurcated_normal(NsToyStream* s, double mean, double sigma_below, double sigma_above) {
    const bool above = ns_uniform(s) * (sigma_below + sigma_above) < sigma_above;
    const double z = fabs(ns_normal(s));
    return above ? mean + sigma_above * z : mean - sigma_below * z;
}

// rng.rs's continuous_poisson; shape: ln λ, envelope, mode.
__device__ double ns_continuous_poisson(NsToyStream* s, const double* shape, double high) {
    for (int i = 0; i < NS_MAX_REJECTIONS; ++i) {
        double t = high * ns_uniform(s);
        double u = ns_uniform(s);
        if (ns_ln(u) <= t * shape[0] - ns_ln_gamma_1p(t) - shape[1]) return t;
    }
    return shape[2];
}

__device__ double ns_poisson(NsToyStream* s, double lambda) {
    if (!(lambda > 0.0)) return 0.0;
    if (lambda < 12.0) {
        double u = ns_uniform(s);
        double p = ns_exp(-lambda);
        double k = 0.0, cdf = p;
        while (u > cdf && k < 1000.0) {
            k += 1.0;
            p *= lambda / k;
            cdf += p;
        }
        return k;
    }
    double slam = sqrt(lambda);
    double loglam = ns_ln(lambda);
    double b = 0.931 + 2.53 * slam;
    double a = -0.059 + 0.02483 * b;
    double inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    double vr = 0.9277 - 3.6224 / (b - 2.0);
    for (;;) {
        double u = ns_uniform(s) - 0.5;
        double v = ns_uniform(s);
        double us = 0.5 - fabs(u);
        double k = floor((2.0 * a / us + b) * u + lambda + 0.43);
        if (us >= 0.07 && v <= vr) return k;
        if (k < 0.0 || (us < 0.013 && v > us)) continue;
        if (ns_ln(v) + ns_ln(inv_alpha) - ns_ln(a / (us * us) + b) <= -lambda + k * loglam - ns_ln_factorial(k))
            return k;
    }
}

// One thread per toy, sampling in the order of the CPU's generate_toy: main bins, then the
// Gaussian auxiliary data, then the Poisson auxiliary data. Several ensembles (each its own
// rates and stream number) go in one launch: thread t makes toy first_toy + t % n_toys of
// ensemble t / n_toys.
__device__ __forceinline__ void ns_sample_toys(
    const double* __restrict__ main_rate, int n_main,
    const double* __restrict__ gauss_mean, const double* __restrict__ gauss_sigma,
    const double* __restrict__ gauss_sigma_low, const unsigned* __restrict__ gauss_aux, int n_gauss,
    const double* __restrict__ gauss_range,
    const double* __restrict__ pois_rate, const double* __restrict__ pois_shape,
    const double* __restrict__ pois_high, const unsigned* __restrict__ pois_aux, int n_pois,
    int n_aux, unsigned long long seed, const unsigned* __restrict__ streams, unsigned first_toy,
    int n_toys, int n_ensembles, double* __restrict__ main_out, double* __restrict__ aux_out) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_toys * n_ensembles) return;
    const int e = t / n_toys;
    NsToyStream s;
    ns_stream_init(&s, seed, streams[e], first_toy + (unsigned)(t % n_toys));
    const double* rate = main_rate + (size_t)e * n_main;
    const double* mean = gauss_mean + (size_t)e * n_gauss;
    const double* prate = pois_rate + (size_t)e * n_pois;
    const double* pshape = pois_shape + (size_t)e * 3 * n_pois;
    double* main_row = main_out + (size_t)t * n_main;
    double* aux_row = aux_out + (size_t)t * n_aux;
    for (int a = 0; a < n_aux; ++a) aux_row[a] = 0.0;
    for (int b = 0; b < n_main; ++b) main_row[b] = ns_poisson(&s, rate[b]);
    for (int c = 0; c < n_gauss; ++c) {
        const double low = gauss_range[2 * c], high = gauss_range[2 * c + 1];
        // Below the observable the constraint's low side: the observable lies above θ.
        aux_row[gauss_aux[c]] = gauss_sigma_low[c] != gauss_sigma[c]
            ? ns_bifurcated_normal(&s, mean[c], gauss_sigma[c], gauss_sigma_low[c])
            : isfinite(low) || isfinite(high)
            ? ns_truncated_normal(&s, mean[c], gauss_sigma[c], low, high)
            : mean[c] + gauss_sigma[c] * ns_normal(&s);
    }
    for (int c = 0; c < n_pois; ++c)
        aux_row[pois_aux[c]] = isfinite(pois_high[c]) ? ns_continuous_poisson(&s, pshape + 3 * c, pois_high[c])
                                                      : ns_poisson(&s, prate[c]);
}

// The kernel takes one argument struct (ns_compute::cuda::abi::ToyArgs); the body above keeps its
// parameter list, inlined.
extern "C" __global__ void sample_toys(const ToyArgs args) {
    ns_sample_toys(args.main_rate, args.n_main, args.gauss_mean, args.gauss_sigma, args.gauss_sigma_low, args.gauss_aux,
                   args.n_gauss, args.gauss_range, args.pois_rate, args.pois_shape, args.pois_high,
                   args.pois_aux, args.n_pois, args.n_aux, args.seed,
                   args.streams, args.first_toy, args.n_toys, args.n_ensembles, args.main_out,
                   args.aux_out);
}
