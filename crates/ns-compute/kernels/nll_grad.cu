// Fused NLL (deviance form: without the data-only constant) and analytic gradient of the
// compiled model, for a batch of evaluations: evaluation i takes parameter row i and dataset
// eval_dataset[i]. One thread block per evaluation (grid-stride over the batch), so the threads
// of a block share one evaluation's intermediates in a per-block scratch area.
//
// Determinism: every sum is over a fixed set of items in a fixed order — a thread's own items
// in index order, then a fixed tree over the block — and no floating-point atomics are used.
// The gradient is gathered, not scattered: each term writes its contribution to its own slot,
// and each parameter sums its slots (param_slots, ascending) in one thread.

#define NS_BLOCK 128
#define NS_LINEAR 0xffffffffu

struct ModelView {
    // Per sample block, 8 words: bin_start, n_bins, entry_start, scalar_start, scalar_end,
    // histosys_start, histosys_end, histosys_delta_start (ns_core::SampleBlock).
    const unsigned* blocks;
    const double* nominal;
    const unsigned* entry_factor_start;
    const unsigned* entry_factor_param;
    const unsigned* entry_block;
    const unsigned* scalar_param;
    const unsigned* scalar_normsys;
    // Per normsys term, 8 values: ln_hi, ln_lo, poly[6].
    const double* normsys;
    const unsigned* histosys_param;
    const unsigned* histosys_block;
    const double* histosys_delta;
    const unsigned* bin_entry_start;
    const unsigned* bin_entries;
    const unsigned* gauss_param;
    const unsigned* gauss_aux;
    const double* gauss_sigma;
    const unsigned* pois_param;
    const unsigned* pois_aux;
    const double* pois_tau;
    const unsigned* param_slot_start;
    const unsigned* param_slots;
    int n_params, n_main, n_aux, n_blocks, n_entries, n_scalar, n_histosys, n_entry_factors;
    int n_gauss, n_pois;
    // 1 or 4 (normsys); 0, 2 or 4 for code4p (histosys).
    int normsys_code, histosys_code;
};

// Poisson deviance n ln(n/λ) + λ − n, a line-for-line twin of ns_compute::poisson::poisson_deviance
// (series in v = (n−λ)/(n+λ) where the halves cancel).
__device__ double ns_deviance(double n, double lambda) {
    if (n == 0.0) return lambda;
    double d = n - lambda;
    if (fabs(d) < 0.1 * (n + lambda)) {
        double v = d / (n + lambda);
        double v2 = v * v;
        double sum = d * v;
        double term = 2.0 * n * v;
        double k = 3.0;
        for (;;) {
            term *= v2;
            double next = sum + term / k;
            if (next == sum) return next;
            sum = next;
            k += 2.0;
        }
    }
    double ratio = n / lambda;
    double log_ratio = (isfinite(ratio) && ratio > 0.0) ? log(ratio) : log(n) - log(lambda);
    return n * log_ratio + lambda - n;
}

// Normsys factor and slope (ns_core::NormsysTerm::factor_and_derivative).
__device__ void ns_normsys(const double* t, int code, double alpha, double* value, double* slope) {
    if (code == 4 && alpha < 1.0 && alpha > -1.0) {
        const double* p = t + 2;
        *value = 1.0 + alpha * (p[0] + alpha * (p[1] + alpha * (p[2] + alpha * (p[3] + alpha * (p[4] + alpha * p[5])))));
        *slope = p[0] + alpha * (2.0 * p[1] + alpha * (3.0 * p[2] + alpha * (4.0 * p[3] + alpha * (5.0 * p[4] + alpha * 6.0 * p[5]))));
    } else if (alpha > 0.0) {
        double f = exp(alpha * t[0]);
        *value = f;
        *slope = f * t[0];
    } else {
        double f = exp(-alpha * t[1]);
        *value = f;
        *slope = -f * t[1];
    }
}

// Histosys weights w_up, w_down, s_up, s_down (ns_core::HistosysWeights::new).
__device__ void ns_histosys_weights(int code, double a, double* w) {
    if (code == 0) {
        if (a > 0.0) { w[0] = a; w[1] = 0.0; w[2] = 1.0; w[3] = 0.0; }
        else { w[0] = 0.0; w[1] = a; w[2] = 0.0; w[3] = 1.0; }
    } else if (code == 2) {
        if (a > 1.0) { w[0] = 1.5 * (a - 1.0); w[1] = -0.5 * (a - 1.0); w[2] = 1.5; w[3] = -0.5; }
        else if (a >= -1.0) {
            double q = 0.5 * a * a, l = 0.5 * a;
            w[0] = q + l; w[1] = l - q; w[2] = a + 0.5; w[3] = 0.5 - a;
        } else { w[0] = -0.5 * a; w[1] = 1.5 * a; w[2] = -0.5; w[3] = 1.5; }
    } else {
        if (a > 1.0) { w[0] = a; w[1] = 0.0; w[2] = 1.0; w[3] = 0.0; }
        else if (a < -1.0) { w[0] = 0.0; w[1] = a; w[2] = 0.0; w[3] = 1.0; }
        else {
            double a2 = a * a;
            double poly = a2 * (a2 * (3.0 * a2 - 10.0) + 15.0) * 0.0625;
            double dpoly = a * (a2 * (18.0 * a2 - 40.0) + 30.0) * 0.0625;
            w[0] = poly + 0.5 * a; w[1] = 0.5 * a - poly; w[2] = dpoly + 0.5; w[3] = 0.5 - dpoly;
        }
    }
}

// Doubles of scratch one block needs (the host sizes the scratch area with the same formula,
// scratch_doubles_per_block in src/cuda/layout.rs).
__device__ size_t ns_scratch_stride(const ModelView& m) {
    size_t slots = (size_t)m.n_scalar + m.n_histosys + m.n_entry_factors + m.n_gauss + m.n_pois;
    return 2 * (size_t)m.n_scalar + m.n_blocks + 2 * (size_t)m.n_entries + m.n_main + slots;
}

// One value per thread combined over the block by a fixed tree (deterministic); every thread
// gets the result. `red` is NS_BLOCK doubles of shared memory.
struct NsAdd { __device__ double operator()(double a, double b) const { return a + b; } };
struct NsMax { __device__ double operator()(double a, double b) const { return fmax(a, b); } };

template <typename Op>
__device__ double ns_block_reduce(double v, double* red, Op op) {
    const int tid = threadIdx.x;
    __syncthreads();
    red[tid] = v;
    __syncthreads();
    for (int width = NS_BLOCK / 2; width > 0; width /= 2) {
        if (tid < width) red[tid] = op(red[tid], red[tid + width]);
        __syncthreads();
    }
    double total = red[0];
    __syncthreads();
    return total;
}

__device__ double ns_block_sum(double v, double* red) {
    return ns_block_reduce(v, red, NsAdd());
}

// Sum over the lanes of a warp by a fixed butterfly; lane 0's value is returned to every lane
// (the lanes' own sums may differ in their last bit).
__device__ double ns_warp_sum(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return __shfl_sync(0xffffffffu, v, 0);
}

// One evaluation by the whole block: NLL (deviance form) and its gradient at full parameter
// vector p against one dataset. Returns the NLL to every thread; writes grad (n_params).
__device__ double ns_nll_grad_block(const ModelView& m, const double* p, const double* obs,
                                    const double* aux, double* scratch, double* grad, double* red) {
    const int tid = threadIdx.x;
    double* scalar_value = scratch;
    double* scalar_slope = scalar_value + m.n_scalar;
    double* block_scale = scalar_slope + m.n_scalar;
    double* base = block_scale + m.n_blocks;
    double* product = base + m.n_entries;
    double* bin_weight = product + m.n_entries;
    double* contrib = bin_weight + m.n_main;
    const int histosys_slot0 = m.n_scalar;
    const int entry_slot0 = histosys_slot0 + m.n_histosys;
    const int gauss_slot0 = entry_slot0 + m.n_entry_factors;
    const int pois_slot0 = gauss_slot0 + m.n_gauss;

    // 1. Scalar factors.
    for (int k = tid; k < m.n_scalar; k += NS_BLOCK) {
        double theta = p[m.scalar_param[k]];
        unsigned term = m.scalar_normsys[k];
        if (term == NS_LINEAR) { scalar_value[k] = theta; scalar_slope[k] = 1.0; }
        else ns_normsys(m.normsys + 8 * (size_t)term, m.normsys_code, theta, &scalar_value[k], &scalar_slope[k]);
    }
    __syncthreads();

    // 2. Per-sample scale, per-entry base yield and entry-factor product.
    for (int b = tid; b < m.n_blocks; b += NS_BLOCK) {
        const unsigned* blk = m.blocks + 8 * (size_t)b;
        double scale = 1.0;
        for (unsigned k = blk[3]; k < blk[4]; ++k) scale *= scalar_value[k];
        block_scale[b] = scale;
    }
    for (int e = tid; e < m.n_entries; e += NS_BLOCK) {
        const unsigned* blk = m.blocks + 8 * (size_t)m.entry_block[e];
        const unsigned h0 = blk[5], nh = blk[6] - blk[5];
        const double* row = m.histosys_delta + blk[7] + (size_t)(e - blk[2]) * 2 * nh;
        double acc = m.nominal[e];
        for (unsigned j = 0; j < nh; ++j) {
            // The weights are a few flops: recomputed here rather than kept in memory.
            double w[4];
            ns_histosys_weights(m.histosys_code, p[m.histosys_param[h0 + j]], w);
            acc += w[0] * row[2 * j] + w[1] * row[2 * j + 1];
        }
        base[e] = acc;
        double prod = 1.0;
        for (unsigned f = m.entry_factor_start[e]; f < m.entry_factor_start[e + 1]; ++f) prod *= p[m.entry_factor_param[f]];
        product[e] = prod;
    }
    __syncthreads();

    // 3. Expected data, the NLL terms and d NLL / d expected.
    double local = 0.0;
    for (int b = tid; b < m.n_main; b += NS_BLOCK) {
        double lambda = 0.0;
        for (unsigned i = m.bin_entry_start[b]; i < m.bin_entry_start[b + 1]; ++i) {
            unsigned e = m.bin_entries[i];
            lambda += base[e] * block_scale[m.entry_block[e]] * product[e];
        }
        double n = obs[b];
        local += ns_deviance(n, lambda);
        bin_weight[b] = n == 0.0 ? 1.0 : 1.0 - n / lambda;
    }
    for (int c = tid; c < m.n_gauss; c += NS_BLOCK) {
        double pull = (aux[m.gauss_aux[c]] - p[m.gauss_param[c]]) / m.gauss_sigma[c];
        local += 0.5 * pull * pull;
    }
    for (int c = tid; c < m.n_pois; c += NS_BLOCK)
        local += ns_deviance(aux[m.pois_aux[c]], p[m.pois_param[c]] * m.pois_tau[c]);
    const double nll = ns_block_sum(local, red);

    // 4. Gradient contributions, one slot per term.
    for (int b = tid; b < m.n_blocks; b += NS_BLOCK) {
        const unsigned* blk = m.blocks + 8 * (size_t)b;
        if (blk[4] == blk[3]) continue;
        double unscaled = 0.0;
        for (unsigned i = 0; i < blk[1]; ++i) {
            unsigned e = blk[2] + i;
            unscaled += bin_weight[blk[0] + i] * product[e] * base[e];
        }
        // Product rule without division, in O(factors): suffix products first (into the
        // block's own contribution slots), then one forward pass with the prefix product.
        double suffix = 1.0;
        for (unsigned k = blk[4]; k-- > blk[3];) {
            suffix *= scalar_value[k];
            contrib[k] = suffix;
        }
        double prefix = 1.0;
        for (unsigned k = blk[3]; k < blk[4]; ++k) {
            const double after = k + 1 < blk[4] ? contrib[k + 1] : 1.0;
            const double value = scalar_value[k];
            contrib[k] = unscaled * prefix * after * scalar_slope[k];
            prefix *= value;
        }
    }
    for (int h = tid; h < m.n_histosys; h += NS_BLOCK) {
        const unsigned* blk = m.blocks + 8 * (size_t)m.histosys_block[h];
        const unsigned j = h - blk[5], nh = blk[6] - blk[5];
        const double* col = m.histosys_delta + blk[7] + 2 * (size_t)j;
        double sum_up = 0.0, sum_down = 0.0;
        for (unsigned i = 0; i < blk[1]; ++i) {
            double w = bin_weight[blk[0] + i] * product[blk[2] + i];
            sum_up += w * col[(size_t)i * 2 * nh];
            sum_down += w * col[(size_t)i * 2 * nh + 1];
        }
        double hw[4];
        ns_histosys_weights(m.histosys_code, p[m.histosys_param[h]], hw);
        contrib[histosys_slot0 + h] = block_scale[m.histosys_block[h]] * (hw[2] * sum_up + hw[3] * sum_down);
    }
    for (int e = tid; e < m.n_entries; e += NS_BLOCK) {
        const unsigned f0 = m.entry_factor_start[e], f1 = m.entry_factor_start[e + 1];
        if (f1 == f0) continue;
        const unsigned* blk = m.blocks + 8 * (size_t)m.entry_block[e];
        double outer = bin_weight[blk[0] + (e - blk[2])] * base[e] * block_scale[m.entry_block[e]];
        for (unsigned f = f0; f < f1; ++f) {
            double others = 1.0;
            for (unsigned g = f0; g < f1; ++g)
                if (g != f) others *= p[m.entry_factor_param[g]];
            contrib[entry_slot0 + f] = outer * others;
        }
    }
    for (int c = tid; c < m.n_gauss; c += NS_BLOCK) {
        double s = m.gauss_sigma[c];
        contrib[gauss_slot0 + c] = (p[m.gauss_param[c]] - aux[m.gauss_aux[c]]) / (s * s);
    }
    for (int c = tid; c < m.n_pois; c += NS_BLOCK) {
        double observed = aux[m.pois_aux[c]];
        contrib[pois_slot0 + c] = observed == 0.0 ? m.pois_tau[c] : m.pois_tau[c] - observed / p[m.pois_param[c]];
    }
    __syncthreads();

    // 5. Gather: one warp per parameter; lane l sums slots l, l+32, … in order, then a fixed
    // butterfly combines the lanes (a parameter acting on every sample has hundreds of slots).
    const int lane = tid & 31;
    for (int q = tid >> 5; q < m.n_params; q += NS_BLOCK / 32) {
        double sum = 0.0;
        for (unsigned s = m.param_slot_start[q] + lane; s < m.param_slot_start[q + 1]; s += 32)
            sum += contrib[m.param_slots[s]];
        sum = ns_warp_sum(sum);
        if (lane == 0) grad[q] = sum;
    }
    __syncthreads();
    return nll;
}

extern "C" __global__ void __launch_bounds__(NS_BLOCK) nll_grad(
    ModelView m, const double* __restrict__ params, const unsigned* __restrict__ eval_dataset,
    const double* __restrict__ main_data, const double* __restrict__ aux_data, int n_eval,
    double* __restrict__ scratch, double* __restrict__ nll_out, double* __restrict__ grad_out) {
    __shared__ double red[NS_BLOCK];
    double* my_scratch = scratch + (size_t)blockIdx.x * ns_scratch_stride(m);
    for (int ev = blockIdx.x; ev < n_eval; ev += gridDim.x) {
        const unsigned d = eval_dataset[ev];
        double nll = ns_nll_grad_block(m, params + (size_t)ev * m.n_params, main_data + (size_t)d * m.n_main,
                                       aux_data + (size_t)d * m.n_aux, my_scratch,
                                       grad_out + (size_t)ev * m.n_params, red);
        if (threadIdx.x == 0) nll_out[ev] = nll;
    }
}
