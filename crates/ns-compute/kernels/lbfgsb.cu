// Device-resident L-BFGS-B: one thread block runs one fit from start to finish — the
// evaluations (ns_nll_grad_block) and the optimizer steps — with no host round trip. It is a port
// of ns-inference's optimizer/lbfgsb.rs (generalized Cauchy point, direct primal subspace
// minimization, strong-Wolfe line search with Hager–Zhang's approximate condition, the same
// constants and the same termination rules); vector work is spread over the block, the small
// sequential parts (breakpoint walk, line-search logic) run in thread 0. Reductions are fixed
// trees, so a fit is deterministic. The fits optimize y = x·scale over the free parameters, as
// the CPU's Fitter does; the objective is twice the NLL without its data constant.

#define NS_MAX_MEMORY 10
#define NS_M2 (2 * NS_MAX_MEMORY)
#define NS_C1 1e-4
#define NS_C2 0.9
#define NS_HZ_DELTA 0.1
#define NS_MAX_LS_EVALS 30
#define NS_DBL_EPSILON 2.220446049250313e-16

// Terminations, as ns_inference::optimizer::Termination.
#define NS_RUNNING -1
#define NS_CONVERGED 0
#define NS_MAX_ITERATIONS 1
#define NS_MAX_EVALUATIONS 2
#define NS_LINE_SEARCH_FAILED 3
#define NS_NON_FINITE_START 4

__device__ double ns_block_max(double v, double* red) {
    return ns_block_reduce(v, red, NsMax());
}

__device__ double ns_block_min(double v, double* red) {
    return -ns_block_max(-v, red);
}

__device__ double ns_project(double x, double lo, double hi) {
    return fmin(fmax(x, lo), hi);
}

// Gauss–Jordan elimination with partial pivoting of the n×n matrix a (row-major, shared memory)
// applied to n_rhs right-hand columns rhs (n×n_rhs, row-major). Returns false (to every thread)
// when a pivot is below 1e-14 of the largest |a| — the CPU's singularity rule.
__device__ bool ns_gauss_jordan(double* a, double* rhs, int n, int n_rhs, double* red, int* pivot_row) {
    const int tid = threadIdx.x;
    double local = 0.0;
    for (int i = tid; i < n * n; i += NS_BLOCK) local = fmax(local, fabs(a[i]));
    const double scale = fmax(ns_block_max(local, red), 2.2250738585072014e-308);
    for (int col = 0; col < n; ++col) {
        if (tid == 0) {
            int best = col;
            for (int r = col + 1; r < n; ++r)
                if (fabs(a[r * n + col]) > fabs(a[best * n + col])) best = r;
            *pivot_row = fabs(a[best * n + col]) <= 1e-14 * scale ? -1 : best;
        }
        __syncthreads();
        const int piv = *pivot_row;
        if (piv < 0) return false;
        if (piv != col) {
            for (int k = tid; k < n; k += NS_BLOCK) {
                double t = a[piv * n + k]; a[piv * n + k] = a[col * n + k]; a[col * n + k] = t;
            }
            for (int k = tid; k < n_rhs; k += NS_BLOCK) {
                double t = rhs[piv * n_rhs + k]; rhs[piv * n_rhs + k] = rhs[col * n_rhs + k]; rhs[col * n_rhs + k] = t;
            }
        }
        __syncthreads();
        const double inv = 1.0 / a[col * n + col];
        __syncthreads();
        for (int k = tid; k < n; k += NS_BLOCK) a[col * n + k] *= inv;
        for (int k = tid; k < n_rhs; k += NS_BLOCK) rhs[col * n_rhs + k] *= inv;
        __syncthreads();
        // Eliminate the column from every other row; the factors are read before any row changes.
        // A warp per row, its lanes across the columns (no index division).
        for (int row = tid >> 5; row < n; row += NS_BLOCK / 32) {
            if (row == col) continue;
            const double factor = a[row * n + col];
            for (int k = tid & 31; k < n + n_rhs; k += 32) {
                if (k < n) {
                    if (k != col) a[row * n + k] -= factor * a[col * n + k];
                } else {
                    rhs[row * n_rhs + (k - n)] -= factor * rhs[col * n_rhs + (k - n)];
                }
            }
        }
        __syncthreads();
        for (int row = tid; row < n; row += NS_BLOCK)
            if (row != col) a[row * n + col] = 0.0;
        __syncthreads();
    }
    return true;
}

struct FitArgs {
    // Per fit (row f of n_params): the full starting vector, the free parameters' indices (first
    // n_free[f] entries), and per free parameter the scaled bounds and the scale.
    const double* init;
    const unsigned* free_index;
    const int* n_free;
    const double* lower;
    const double* upper;
    const double* scale;
    const unsigned* fit_dataset;
    const double* main_data;
    const double* aux_data;
    // Outputs: the scaled free variables and their gradient at the result, the objective there.
    double* x_out;
    double* g_out;
    double* f_out;
    int* iterations_out;
    int* evaluations_out;
    int* termination_out;
    double* workspace;
    double pg_tol;
    int n_fits, memory, max_iterations, max_evaluations;
};

// Doubles of optimizer workspace one block needs (LBFGSB_VECTORS in session.rs): 13 vectors,
// the S and Y histories, and one more vector's room for two int arrays (breakpoint order, free
// flags).
__device__ size_t ns_lbfgsb_stride(int n_params, int memory) {
    return (size_t)14 * n_params + 2 * (size_t)memory * n_params;
}

struct LinePoint { double alpha, phi, dphi; };

// Safeguarded cubic interpolation between two line-search points (lbfgsb.rs `interpolate`).
__device__ double ns_interpolate(LinePoint lo, LinePoint hi) {
    double a = lo.alpha, b = hi.alpha;
    double mid = 0.5 * (a + b);
    if (!(isfinite(lo.phi) && isfinite(hi.phi) && isfinite(lo.dphi) && isfinite(hi.dphi))) return mid;
    double d1 = lo.dphi + hi.dphi - 3.0 * (lo.phi - hi.phi) / (a - b);
    double disc = d1 * d1 - lo.dphi * hi.dphi;
    if (disc < 0.0) return mid;
    double sgn = (b - a) > 0.0 ? 1.0 : ((b - a) < 0.0 ? -1.0 : 0.0);
    double d2 = sgn * sqrt(disc);
    double alpha = b - (b - a) * (hi.dphi + d2 - d1) / (hi.dphi - lo.dphi + 2.0 * d2);
    double left = fmin(a, b), right = fmax(a, b);
    double margin = 0.1 * (right - left);
    return (isfinite(alpha) && alpha > left + margin && alpha < right - margin) ? alpha : mid;
}

struct OptShared {
    double M[NS_M2 * NS_M2];     // middle matrix of the compact form
    double work[NS_M2 * NS_M2];  // Gauss–Jordan matrix
    double rhs[NS_M2 * NS_M2];   // Gauss–Jordan right-hand sides
    double ss[NS_MAX_MEMORY * NS_MAX_MEMORY], sy[NS_MAX_MEMORY * NS_MAX_MEMORY], yy[NS_MAX_MEMORY * NS_MAX_MEMORY];
    double p[NS_M2], c[NS_M2], v[NS_M2], mc[NS_M2], tmp[NS_M2], wb[NS_M2], mw[NS_M2];
    // Rows of W = [Y, θS] for the current direction: W[i][r] = wrow[r][i]·wfac[r].
    const double* wrow[NS_M2];
    double wfac[NS_M2];
    double red[NS_BLOCK];
    double f, theta, dphi0, alpha_max, alpha, t_cp, dt_min, step, best_alpha, best_f, trial_f, eval_nll;
    LinePoint previous, zoom_lo, zoom_hi;
    int k, head, iterations, evaluations, termination, has_zoom, ls_evals, has_best, pivot, status, n_free, flag;
};

// W = [Y, θS] row i, element r, from the row table set at the start of ns_direction.
__device__ double ns_w(const OptShared& sh, int i, int r) {
    return sh.wrow[r][i] * sh.wfac[r];
}

// out[r] = Σ_i W[i][r]·weight[i] over the i with mask[i] == 1 (every i when mask is null), for
// r < 2k, by all threads: thread t takes column t mod 2k and every parts-th i, then thread r sums
// the parts in order.
__device__ void ns_wt_times(OptShared& sh, int n,
                            const double* weight, const int* mask, double* out) {
    const int tid = threadIdx.x, n2 = 2 * sh.k;
    if (n2 == 0) return;
    const int parts = NS_BLOCK / n2;
    __syncthreads();
    if (tid < parts * n2) {
        const int r = tid % n2, part = tid / n2;
        double acc = 0.0;
        for (int i = part; i < n; i += parts)
            if ((mask == nullptr || mask[i]) && weight[i] != 0.0) acc += ns_w(sh, i, r) * weight[i];
        sh.red[part * n2 + r] = acc;
    }
    __syncthreads();
    if (tid < n2) {
        double total = 0.0;
        for (int part = 0; part < parts; ++part) total += sh.red[part * n2 + tid];
        out[tid] = total;
    }
    __syncthreads();
}

// Twice the NLL and its gradient in scaled free coordinates at y (into f and g).
__device__ double ns_objective(const ModelView& m, const FitArgs& a, int fit, const double* y, double* g,
                               double* pfull, double* gfull, double* scratch, OptShared& sh) {
    const int tid = threadIdx.x, P = m.n_params, nf = sh.n_free;
    const double* init = a.init + (size_t)fit * P;
    const unsigned* free_index = a.free_index + (size_t)fit * P;
    const double* scale = a.scale + (size_t)fit * P;
    for (int i = tid; i < P; i += NS_BLOCK) pfull[i] = init[i];
    __syncthreads();
    for (int k = tid; k < nf; k += NS_BLOCK) pfull[free_index[k]] = y[k] / scale[k];
    __syncthreads();
    const unsigned d = a.fit_dataset[fit];
    double nll = ns_nll_grad_block(m, pfull, a.main_data + (size_t)d * m.n_main, a.aux_data + (size_t)d * m.n_aux,
                                   scratch, gfull, sh.red);
    for (int k = tid; k < nf; k += NS_BLOCK) g[k] = 2.0 * gfull[free_index[k]] / scale[k];
    __syncthreads();
    return 2.0 * nll;
}

// a·b by one warp: lane l sums elements l, l+32, …, then a fixed butterfly; lane 0's value is
// returned to every lane.
__device__ double ns_warp_dot(const double* a, const double* b, int n) {
    double sum = 0.0;
    for (int i = threadIdx.x & 31; i < n; i += 32) sum += a[i] * b[i];
    return ns_warp_sum(sum);
}


__device__ double ns_dot(const double* a, const double* b, int n, double* red) {
    double local = 0.0;
    for (int i = threadIdx.x; i < n; i += NS_BLOCK) local += a[i] * b[i];
    return ns_block_sum(local, red);
}

// Generalized Cauchy point, then subspace minimization: the direction x̄ − x into dir.
__device__ void ns_direction(OptShared& sh, const double* x, const double* g, const double* lo, const double* hi,
                             const double* S, const double* Y, int n, int stride, int memory, double* t, double* d, double* xcp,
                             double* du, int* order, int* is_free, double* dir) {
    const int tid = threadIdx.x;
    // The middle matrix M = [[−D, Lᵀ], [L, θSᵀS]]⁻¹.
    if (sh.k > 0) {
        const int k = sh.k, n2 = 2 * k;
        for (int idx = tid; idx < n2 * n2; idx += NS_BLOCK) {
            int r = idx / n2, c = idx % n2;
            double v = 0.0;
            if (r < k && c < k) v = r == c ? -sh.sy[r * NS_MAX_MEMORY + c] : 0.0;
            else if (r >= k && c < k) v = (r - k) > c ? sh.sy[(r - k) * NS_MAX_MEMORY + c] : 0.0;
            else if (r < k && c >= k) v = (c - k) > r ? sh.sy[(c - k) * NS_MAX_MEMORY + r] : 0.0;
            else v = sh.theta * sh.ss[(r - k) * NS_MAX_MEMORY + (c - k)];
            sh.work[idx] = v;
            sh.rhs[idx] = r == c ? 1.0 : 0.0;
        }
        __syncthreads();
        bool ok = ns_gauss_jordan(sh.work, sh.rhs, n2, n2, sh.red, &sh.pivot);
        if (ok) {
            for (int idx = tid; idx < n2 * n2; idx += NS_BLOCK) sh.M[idx] = sh.rhs[idx];
        } else if (tid == 0) {
            sh.k = 0; sh.head = 0; sh.theta = 1.0;  // reset_memory
        }
        __syncthreads();
    }
    const int k = sh.k, n2 = 2 * k;
    const double theta = sh.theta;
    for (int r = tid; r < n2; r += NS_BLOCK) {
        const int pair = r < k ? r : r - k;
        const double* rows = r < k ? Y : S;
        sh.wrow[r] = rows + (size_t)((sh.head + pair) % memory) * stride;
        sh.wfac[r] = r < k ? 1.0 : theta;
    }
    __syncthreads();

    // Breakpoints along the projected steepest-descent path, in increasing order (ties by index).
    for (int i = tid; i < n; i += NS_BLOCK) {
        double ti;
        if (g[i] < 0.0) ti = (x[i] - hi[i]) / g[i];
        else if (g[i] > 0.0) ti = (x[i] - lo[i]) / g[i];
        else ti = __longlong_as_double(0x7ff0000000000000LL);
        t[i] = ti;
        d[i] = ti > 0.0 ? -g[i] : 0.0;
        xcp[i] = x[i];
    }
    __syncthreads();
    // Sort keys in du (free until the subspace step): the breakpoint, or +∞ where there is none,
    // so the rank is one comparison per pair.
    const double inf_key = __longlong_as_double(0x7ff0000000000000LL);
    for (int i = tid; i < n; i += NS_BLOCK) du[i] = (t[i] > 0.0 && isfinite(t[i])) ? t[i] : inf_key;
    __syncthreads();
    int local_valid = 0;
    for (int i = tid; i < n; i += NS_BLOCK) {
        const double key = du[i];
        if (key != inf_key) {
            int rank = 0;
            for (int j = 0; j < n; ++j) rank += (du[j] < key || (du[j] == key && j < i)) ? 1 : 0;
            order[rank] = i;
            ++local_valid;
        }
    }
    const int n_valid = (int)ns_block_sum((double)local_valid, sh.red);
    ns_wt_times(sh, n, d, nullptr, sh.p);
    for (int r = tid; r < n2; r += NS_BLOCK) sh.c[r] = 0.0;
    const double dd = ns_dot(d, d, n, sh.red);
    // The walk along the breakpoints is sequential: warp 0 does it, lane r holding component r of
    // the 2k-vectors p, c, W_b and M·W_b; sums are butterflies broadcast from lane 0, so every lane
    // takes the same branches.
    if (tid < 32) {
        const int lane = tid;
        const bool own = lane < n2;
        double p_r = own ? sh.p[lane] : 0.0, c_r = 0.0;
        double row = 0.0;
        if (own)
            for (int q = 0; q < n2; ++q) row += sh.M[lane * n2 + q] * sh.p[q];
        double fp = -dd;
        double fpp = -theta * fp - ns_warp_sum(p_r * row);
        const double inf = __longlong_as_double(0x7ff0000000000000LL);
        double dt_min = fpp > 0.0 ? -fp / fpp : inf;
        double t_old = 0.0;
        for (int next = 0; next < n_valid; ++next) {
            const int b = order[next];
            const double dt = t[b] - t_old;
            if (dt_min < dt) break;
            const double bound = d[b] > 0.0 ? hi[b] : lo[b];
            const double z_b = bound - x[b];
            if (own) c_r += dt * p_r;
            const double wb_r = own ? ns_w(sh, b, lane) : 0.0;
            if (own) sh.wb[lane] = wb_r;
            __syncwarp();
            double mw_r = 0.0;
            if (own)
                for (int q = 0; q < n2; ++q) mw_r += sh.M[lane * n2 + q] * sh.wb[q];
            const double mwc = ns_warp_sum(mw_r * c_r), mwp = ns_warp_sum(mw_r * p_r), mww = ns_warp_sum(mw_r * wb_r);
            const double gb = g[b];
            fp += dt * fpp + gb * gb + theta * gb * z_b - gb * mwc;
            fpp += -theta * gb * gb - 2.0 * gb * mwp - gb * gb * mww;
            if (own) p_r += gb * wb_r;
            __syncwarp();
            if (lane == 0) {
                xcp[b] = bound;
                d[b] = 0.0;
            }
            dt_min = fpp > 0.0 ? -fp / fpp : inf;
            t_old = t[b];
        }
        if (own) {
            sh.p[lane] = p_r;
            sh.c[lane] = c_r;
        }
        if (lane == 0) {
            dt_min = isfinite(dt_min) ? fmax(dt_min, 0.0) : 0.0;
            sh.dt_min = dt_min;
            sh.t_cp = t_old + dt_min;
        }
    }
    __syncthreads();
    for (int i = tid; i < n; i += NS_BLOCK)
        if (d[i] != 0.0) xcp[i] = ns_project(x[i] + sh.t_cp * d[i], lo[i], hi[i]);
    for (int r = tid; r < n2; r += NS_BLOCK) sh.c[r] += sh.dt_min * sh.p[r];
    __syncthreads();

    // Subspace minimization over the variables free at the Cauchy point.
    int local_free = 0;
    for (int i = tid; i < n; i += NS_BLOCK) {
        is_free[i] = (xcp[i] > lo[i] && xcp[i] < hi[i]) ? 1 : 0;
        local_free += is_free[i];
    }
    const int n_free_cp = (int)ns_block_sum((double)local_free, sh.red);
    if (n_free_cp > 0) {
        for (int r = tid; r < n2; r += NS_BLOCK) {
            double acc = 0.0;
            for (int q = 0; q < n2; ++q) acc += sh.M[r * n2 + q] * sh.c[q];
            sh.mc[r] = acc;
        }
        __syncthreads();
        // r̂ into t (no longer needed), du = −r̂/θ.
        for (int i = tid; i < n; i += NS_BLOCK) {
            if (!is_free[i]) continue;
            double wmc = 0.0;
            for (int r = 0; r < n2; ++r) wmc += ns_w(sh, i, r) * sh.mc[r];
            t[i] = g[i] + theta * (xcp[i] - x[i]) - wmc;
            du[i] = -t[i] / theta;
        }
        __syncthreads();
        if (n2 > 0) {
            ns_wt_times(sh, n, t, is_free, sh.tmp);
            for (int q = tid; q < n2; q += NS_BLOCK) {
                double acc = 0.0;
                for (int r = 0; r < n2; ++r) acc += sh.M[q * n2 + r] * sh.tmp[r];
                sh.v[q] = acc;
            }
            // The variables at a bound, in index order (few, usually), into `order` (the
            // breakpoint order is no longer needed).
            if (tid == 0) {
                int count = 0;
                for (int i = 0; i < n; ++i)
                    if (!is_free[i]) order[count++] = i;
                sh.pivot = count;
            }
            __syncthreads();
            const int n_bound = sh.pivot;
            // WᶻᵀWᶻ = WᵀW (cached inner products) minus the rows of the variables at a bound (into rhs).
            for (int idx = tid; idx < n2 * n2; idx += NS_BLOCK) {
                int a = idx / n2, b = idx % n2;
                double v;
                if (a < k && b < k) v = sh.yy[a * NS_MAX_MEMORY + b];
                else if (a < k) v = theta * sh.sy[(b - k) * NS_MAX_MEMORY + a];
                else if (b < k) v = theta * sh.sy[(a - k) * NS_MAX_MEMORY + b];
                else v = theta * theta * sh.ss[(a - k) * NS_MAX_MEMORY + (b - k)];
                for (int j = 0; j < n_bound; ++j) v -= ns_w(sh, order[j], a) * ns_w(sh, order[j], b);
                sh.rhs[idx] = v;
            }
            __syncthreads();
            // N = I − (1/θ) M WᶻᵀWᶻ.
            for (int idx = tid; idx < n2 * n2; idx += NS_BLOCK) {
                int a = idx / n2, b = idx % n2;
                double mw = 0.0;
                for (int q = 0; q < n2; ++q) mw += sh.M[a * n2 + q] * sh.rhs[q * n2 + b];
                sh.work[idx] = (a == b ? 1.0 : 0.0) - mw / theta;
            }
            __syncthreads();
            for (int q = tid; q < n2; q += NS_BLOCK) sh.rhs[q] = sh.v[q];
            __syncthreads();
            if (ns_gauss_jordan(sh.work, sh.rhs, n2, 1, sh.red, &sh.pivot)) {
                for (int i = tid; i < n; i += NS_BLOCK) {
                    if (!is_free[i]) continue;
                    double wv = 0.0;
                    for (int r = 0; r < n2; ++r) wv += ns_w(sh, i, r) * sh.rhs[r];
                    du[i] -= wv / (theta * theta);
                }
            }
            __syncthreads();
        }
        // Largest step ≤ 1 along du that keeps the free variables in the box.
        double local_step = 1.0;
        for (int i = tid; i < n; i += NS_BLOCK) {
            if (!is_free[i]) continue;
            if (du[i] > 0.0) local_step = fmin(local_step, (hi[i] - xcp[i]) / du[i]);
            else if (du[i] < 0.0) local_step = fmin(local_step, (lo[i] - xcp[i]) / du[i]);
        }
        const double step = ns_block_min(local_step, sh.red);
        for (int i = tid; i < n; i += NS_BLOCK)
            dir[i] = (is_free[i] ? ns_project(xcp[i] + step * du[i], lo[i], hi[i]) : xcp[i]) - x[i];
    } else {
        for (int i = tid; i < n; i += NS_BLOCK) dir[i] = xcp[i] - x[i];
    }
    __syncthreads();
}

// Resident blocks per multiprocessor the fit kernel is compiled for (caps its registers); set by
// the host (NEXTSTAT_FIT_MIN_BLOCKS, see compile.rs).
#ifndef NS_FIT_MIN_BLOCKS
#define NS_FIT_MIN_BLOCKS 4
#endif
extern "C" __global__ void __launch_bounds__(NS_BLOCK, NS_FIT_MIN_BLOCKS) fit_lbfgsb(ModelView m, FitArgs a, double* __restrict__ scratch) {
    __shared__ OptShared sh;
    const int tid = threadIdx.x, P = m.n_params, memory = a.memory;
    double* eval_scratch = scratch + (size_t)blockIdx.x * ns_scratch_stride(m);
    double* w = a.workspace + (size_t)blockIdx.x * ns_lbfgsb_stride(P, memory);
    double *pfull = w, *gfull = w + P, *x = w + 2 * P, *g = w + 3 * P, *trial = w + 4 * P, *dir = w + 5 * P;
    double *tg = w + 6 * P, *best_x = w + 7 * P, *best_g = w + 8 * P, *t = w + 9 * P, *d = w + 10 * P;
    double *xcp = w + 11 * P, *du = w + 12 * P, *S = w + 13 * P, *Y = S + (size_t)memory * P;
    int* order = (int*)(Y + (size_t)memory * P);
    int* is_free = order + P;

    for (int fit = blockIdx.x; fit < a.n_fits; fit += gridDim.x) {
        const int n = a.n_free[fit];
        const double* lo = a.lower + (size_t)fit * P;
        const double* hi = a.upper + (size_t)fit * P;
        const double* scale = a.scale + (size_t)fit * P;
        const double* init = a.init + (size_t)fit * P;
        const unsigned* free_index = a.free_index + (size_t)fit * P;
        if (tid == 0) {
            sh.n_free = n; sh.k = 0; sh.head = 0; sh.theta = 1.0; sh.iterations = 0; sh.evaluations = 0;
            sh.termination = NS_RUNNING; sh.f = __longlong_as_double(0x7ff0000000000000LL);
        }
        __syncthreads();
        for (int i = tid; i < n; i += NS_BLOCK) {
            trial[i] = ns_project(init[free_index[i]] * scale[i], lo[i], hi[i]);
            x[i] = trial[i];
            g[i] = 0.0;
        }
        __syncthreads();
        // Start: evaluate x0.
        double f0 = ns_objective(m, a, fit, trial, tg, pfull, gfull, eval_scratch, sh);
        double bad = 0.0;
        for (int i = tid; i < n; i += NS_BLOCK) bad += isfinite(tg[i]) ? 0.0 : 1.0;
        bad = ns_block_sum(bad, sh.red);
        if (tid == 0) {
            sh.evaluations = 1;
            if (isnan(f0)) f0 = __longlong_as_double(0x7ff0000000000000LL);
            if (!isfinite(f0) || bad > 0.0) sh.termination = NS_NON_FINITE_START;
            else sh.f = f0;
            sh.status = 0;  // next iteration
        }
        __syncthreads();
        if (sh.termination == NS_RUNNING)
            for (int i = tid; i < n; i += NS_BLOCK) g[i] = tg[i];
        __syncthreads();

        while (sh.termination == NS_RUNNING) {
            if (sh.status == 0) {
                // next_iteration: convergence, iteration cap, direction, first trial step.
                double local = 0.0;
                for (int i = tid; i < n; i += NS_BLOCK)
                    local = fmax(local, fabs(ns_project(x[i] - g[i], lo[i], hi[i]) - x[i]) * scale[i]);
                double pg = ns_block_max(local, sh.red);
                if (tid == 0) {
                    if (pg <= a.pg_tol) sh.termination = NS_CONVERGED;
                    else if (sh.iterations >= a.max_iterations) sh.termination = NS_MAX_ITERATIONS;
                }
                __syncthreads();
                if (sh.termination != NS_RUNNING) break;
                ns_direction(sh, x, g, lo, hi, S, Y, n, P, memory, t, d, xcp, du, order, is_free, dir);
                double dphi0 = ns_dot(g, dir, n, sh.red);
                if (!(dphi0 < 0.0) && sh.k > 0) {
                    if (tid == 0) { sh.k = 0; sh.head = 0; sh.theta = 1.0; }
                    __syncthreads();
                    ns_direction(sh, x, g, lo, hi, S, Y, n, P, memory, t, d, xcp, du, order, is_free, dir);
                    dphi0 = ns_dot(g, dir, n, sh.red);
                }
                if (!(dphi0 < 0.0)) {
                    if (tid == 0) sh.termination = NS_LINE_SEARCH_FAILED;
                    __syncthreads();
                    break;
                }
                double local_step = __longlong_as_double(0x7ff0000000000000LL);
                for (int i = tid; i < n; i += NS_BLOCK) {
                    if (dir[i] > 0.0) local_step = fmin(local_step, (hi[i] - x[i]) / dir[i]);
                    else if (dir[i] < 0.0) local_step = fmin(local_step, (lo[i] - x[i]) / dir[i]);
                }
                double alpha_max = fmin(fmax(ns_block_min(local_step, sh.red), 0.0), 1e10);
                double norm = sqrt(ns_dot(dir, dir, n, sh.red));
                if (tid == 0) {
                    double first = (sh.iterations == 0 && sh.k == 0) ? fmin(1.0 / norm, 1.0) : 1.0;
                    sh.alpha = fmin(first, alpha_max);
                    sh.alpha_max = alpha_max;
                    sh.dphi0 = dphi0;
                    sh.previous.alpha = 0.0; sh.previous.phi = sh.f; sh.previous.dphi = dphi0;
                    sh.has_zoom = 0; sh.ls_evals = 0; sh.has_best = 0;
                    sh.status = 1;
                }
                __syncthreads();
                for (int i = tid; i < n; i += NS_BLOCK) trial[i] = ns_project(x[i] + sh.alpha * dir[i], lo[i], hi[i]);
                __syncthreads();
            }
            if (sh.evaluations >= a.max_evaluations) {
                if (tid == 0) sh.termination = NS_MAX_EVALUATIONS;
                __syncthreads();
                break;
            }
            // Line search: evaluate the trial point.
            double phi = ns_objective(m, a, fit, trial, tg, pfull, gfull, eval_scratch, sh);
            if (isnan(phi)) phi = __longlong_as_double(0x7ff0000000000000LL);
            double dphi_all = ns_dot(tg, dir, n, sh.red);
            // Outcome: 0 continue, 1 accept trial, 2 accept best, 3 reset and next iteration, 4 fail.
            if (tid == 0) {
                sh.evaluations += 1;
                sh.ls_evals += 1;
                double dphi = isfinite(phi) ? dphi_all : __longlong_as_double(0x7ff8000000000000LL);
                LinePoint current = {sh.alpha, phi, dphi};
                double noise = 1e-12 * fmax(fabs(sh.f), 1.0);
                bool armijo = isfinite(phi) && (phi <= sh.f + NS_C1 * sh.alpha * sh.dphi0 ||
                                                (phi <= sh.f + noise && dphi >= NS_C2 * sh.dphi0 &&
                                                 dphi <= (2.0 * NS_HZ_DELTA - 1.0) * sh.dphi0));
                sh.flag = 0;
                if (armijo && (!sh.has_best || phi < sh.best_f)) sh.flag = 5;  // record best
                bool curvature = fabs(dphi) <= -NS_C2 * sh.dphi0;
                int outcome = 0;
                if (armijo && curvature) outcome = 1;
                else {
                    if (!sh.has_zoom) {
                        if (!armijo || (sh.ls_evals > 1 && phi >= sh.previous.phi)) {
                            sh.zoom_lo = sh.previous; sh.zoom_hi = current; sh.has_zoom = 1;
                        } else if (dphi >= 0.0) {
                            sh.zoom_lo = current; sh.zoom_hi = sh.previous; sh.has_zoom = 1;
                        } else if (sh.alpha >= sh.alpha_max) {
                            outcome = 1;
                        } else {
                            sh.previous = current;
                            sh.alpha = fmin(4.0 * sh.alpha, sh.alpha_max);
                        }
                    } else {
                        LinePoint lo_p = sh.zoom_lo, hi_p = sh.zoom_hi;
                        if (!armijo || phi >= lo_p.phi) { sh.zoom_hi = current; }
                        else if (dphi * (hi_p.alpha - lo_p.alpha) >= 0.0) { sh.zoom_lo = current; sh.zoom_hi = lo_p; }
                        else { sh.zoom_lo = current; sh.zoom_hi = hi_p; }
                    }
                    if (outcome == 0 && sh.has_zoom) {
                        double width = fabs(sh.zoom_hi.alpha - sh.zoom_lo.alpha);
                        if (sh.ls_evals >= NS_MAX_LS_EVALS || width <= 1e-15 * fmax(fabs(sh.zoom_lo.alpha), 1e-300))
                            outcome = 4;
                        else
                            sh.alpha = ns_interpolate(sh.zoom_lo, sh.zoom_hi);
                    }
                    if (outcome == 0 && sh.ls_evals >= NS_MAX_LS_EVALS) outcome = 4;
                }
                if (outcome == 4) {
                    // line_search_failed: the best sufficient-decrease point, else reset, else stop.
                    bool best_ok = sh.has_best || sh.flag == 5;
                    double best_f = sh.flag == 5 ? phi : sh.best_f;
                    if (best_ok && best_f < sh.f) outcome = 2;
                    else if (sh.k == 0) outcome = 5;
                    else outcome = 3;
                }
                sh.status = outcome;
                sh.trial_f = phi;
            }
            __syncthreads();
            if (sh.flag == 5) {
                for (int i = tid; i < n; i += NS_BLOCK) { best_x[i] = trial[i]; best_g[i] = tg[i]; }
                if (tid == 0) { sh.has_best = 1; sh.best_f = sh.trial_f; sh.best_alpha = sh.alpha; }
                __syncthreads();
            }
            const int outcome = sh.status;
            __syncthreads();  // every thread has read the outcome before thread 0 moves on
            if (outcome == 0) {
                for (int i = tid; i < n; i += NS_BLOCK) trial[i] = ns_project(x[i] + sh.alpha * dir[i], lo[i], hi[i]);
                if (tid == 0) sh.status = 1;
                __syncthreads();
                continue;
            }
            if (outcome == 5) {
                if (tid == 0) sh.termination = NS_LINE_SEARCH_FAILED;
                __syncthreads();
                break;
            }
            if (outcome == 3) {
                if (tid == 0) { sh.k = 0; sh.head = 0; sh.theta = 1.0; sh.status = 0; }
                __syncthreads();
                continue;
            }
            // Accept (the trial point, or the best point seen): update the memory.
            const double f_new = outcome == 2 ? sh.best_f : sh.trial_f;
            const double* x_new = outcome == 2 ? best_x : trial;
            const double* g_new = outcome == 2 ? best_g : tg;
            // s into d, y into du.
            for (int i = tid; i < n; i += NS_BLOCK) { d[i] = x_new[i] - x[i]; du[i] = g_new[i] - g[i]; }
            __syncthreads();
            double sy = ns_dot(d, du, n, sh.red);
            double yy = ns_dot(du, du, n, sh.red);
            if (sy > NS_DBL_EPSILON * yy && sy > 0.0) {
                if (tid == 0 && sh.k == memory) {
                    // Drop the oldest pair: shift the inner products up-left.
                    for (int i = 0; i + 1 < memory; ++i)
                        for (int j = 0; j + 1 < memory; ++j) {
                            sh.ss[i * NS_MAX_MEMORY + j] = sh.ss[(i + 1) * NS_MAX_MEMORY + j + 1];
                            sh.sy[i * NS_MAX_MEMORY + j] = sh.sy[(i + 1) * NS_MAX_MEMORY + j + 1];
                            sh.yy[i * NS_MAX_MEMORY + j] = sh.yy[(i + 1) * NS_MAX_MEMORY + j + 1];
                        }
                    sh.head = (sh.head + 1) % memory;
                    sh.k -= 1;
                }
                __syncthreads();
                const int k = sh.k;
                // New row/column: s·s_j, y·y_j, s·y_j and s_j·y for the kept pairs j, one warp
                // per pair (each warp writes only its own entries).
                for (int j = tid >> 5; j < k; j += NS_BLOCK / 32) {
                    const double* sj = S + (size_t)((sh.head + j) % memory) * P;
                    const double* yj = Y + (size_t)((sh.head + j) % memory) * P;
                    double v1 = ns_warp_dot(d, sj, n);
                    double v2 = ns_warp_dot(du, yj, n);
                    double v3 = ns_warp_dot(d, yj, n);
                    double v4 = ns_warp_dot(sj, du, n);
                    if ((tid & 31) == 0) {
                        sh.ss[k * NS_MAX_MEMORY + j] = v1; sh.ss[j * NS_MAX_MEMORY + k] = v1;
                        sh.yy[k * NS_MAX_MEMORY + j] = v2; sh.yy[j * NS_MAX_MEMORY + k] = v2;
                        sh.sy[k * NS_MAX_MEMORY + j] = v3; sh.sy[j * NS_MAX_MEMORY + k] = v4;
                    }
                }
                __syncthreads();
                double ss_new = ns_dot(d, d, n, sh.red);
                const int slot = (sh.head + k) % memory;
                for (int i = tid; i < n; i += NS_BLOCK) { S[(size_t)slot * P + i] = d[i]; Y[(size_t)slot * P + i] = du[i]; }
                if (tid == 0) {
                    sh.ss[k * NS_MAX_MEMORY + k] = ss_new;
                    sh.yy[k * NS_MAX_MEMORY + k] = yy;
                    sh.sy[k * NS_MAX_MEMORY + k] = sy;
                    sh.k = k + 1;
                    sh.theta = yy / sy;
                }
                __syncthreads();
            }
            for (int i = tid; i < n; i += NS_BLOCK) { x[i] = x_new[i]; g[i] = g_new[i]; }
            if (tid == 0) { sh.f = f_new; sh.iterations += 1; sh.status = 0; }
            __syncthreads();
        }
        for (int i = tid; i < n; i += NS_BLOCK) {
            a.x_out[(size_t)fit * P + i] = x[i];
            a.g_out[(size_t)fit * P + i] = g[i];
        }
        if (tid == 0) {
            a.f_out[fit] = sh.f;
            a.iterations_out[fit] = sh.iterations;
            a.evaluations_out[fit] = sh.evaluations;
            a.termination_out[fit] = sh.termination;
        }
        __syncthreads();
    }
}
