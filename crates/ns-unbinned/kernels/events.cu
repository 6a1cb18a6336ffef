// The event sums of one channel of an unbinned model, for a batch of rows (parameter points,
// each on its own dataset): per event, every node's value forward and its adjoint backward, as
// `model.rs` does on the CPU; per row and block, Σ w·ln v and the per-node sums, reduced over
// the block in a fixed tree and written out per block (the host adds the blocks in order). No
// atomics: the same launch gives the same bits every time.
//
// Shapes are written once over a dual number carrying derivatives in their arguments, as the
// Rust shapes are.
//
// The kernel is compiled per model (`cuda.rs` passes the tree as constant arrays in -D
// options): with the node loops unrolled and every index known to the compiler, values,
// adjoints and sums live in registers.

#ifndef NS_NODES
#error "compile with the model's tree: NS_NODES, NS_ARGS, NS_SUMS, NS_KIND, ..."
#endif
// The node kinds (NS_LEAF, NS_PRODUCT, NS_MIXTURE), shape codes (NS_GAUSSIAN, …,
// NS_LOG_DENSITY_COLUMN), NS_BLOCK and NS_EVENTS_PER_THREAD come from `cuda.rs` (`Code`,
// `kernel_constants`) as -D options: no number here repeats one there.
#ifndef NS_LOG_DENSITY_COLUMN
#error "compile with cuda.rs's kernel constants: NS_LEAF, NS_GAUSSIAN, ..., NS_BLOCK"
#endif
#define NS_MAX_ARGS NS_ARGS

struct Dual {
    double v;
    double d[NS_MAX_ARGS];
};

__device__ __forceinline__ Dual dconst(double v) {
    Dual r; r.v = v;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = 0.0;
    return r;
}
__device__ __forceinline__ Dual dinput(double v, int i) { Dual r = dconst(v); r.d[i] = 1.0; return r; }
__device__ __forceinline__ Dual operator+(Dual a, Dual b) { Dual r; r.v = a.v + b.v;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = a.d[i] + b.d[i]; return r; }
__device__ __forceinline__ Dual operator-(Dual a, Dual b) { Dual r; r.v = a.v - b.v;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = a.d[i] - b.d[i]; return r; }
__device__ __forceinline__ Dual operator*(Dual a, Dual b) { Dual r; r.v = a.v * b.v;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = a.d[i] * b.v + a.v * b.d[i]; return r; }
__device__ __forceinline__ Dual operator/(Dual a, Dual b) { Dual r; double q = a.v / b.v; r.v = q;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = (a.d[i] - q * b.d[i]) / b.v; return r; }
__device__ __forceinline__ Dual operator*(Dual a, double b) { Dual r; r.v = a.v * b;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = a.d[i] * b; return r; }
__device__ __forceinline__ Dual operator+(Dual a, double b) { a.v += b; return a; }
__device__ __forceinline__ Dual operator-(Dual a) { return a * -1.0; }
__device__ __forceinline__ Dual dlog(Dual a) { Dual r; r.v = log(a.v); double s = 1.0 / a.v;
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = a.d[i] * s; return r; }
__device__ __forceinline__ Dual dabs(Dual a) { return a.v < 0.0 ? -a : a; }
__device__ __forceinline__ Dual dlog1p(Dual a) { Dual r; r.v = log1p(a.v); double s = 1.0 / (1.0 + a.v);
    #pragma unroll
    for (int i = 0; i < NS_MAX_ARGS; i++) r.d[i] = a.d[i] * s; return r; }

// −α²/2 − n ln(1 + α(|t| − α)/n): the power-law tail continuous with the core, written without
// n/α (exact as α → 0); the twin of `crystalball::log_density`.
__device__ Dual cb_tail(Dual alpha, Dual n, Dual t_abs) {
    return alpha * alpha * -0.5 - n * dlog1p(alpha * (t_abs - alpha) / n);
}

// ln g at x; `a` the seeded arguments, `lo`/`hi` the observable's range, `hist` the contents
// of a histogram (bins over [h_lo, h_hi]).
__device__ Dual log_density(int shape, int flags, double x, const Dual* a, double lo, double hi,
                            const double* hist, int nbins, double h_lo, double h_hi) {
    switch (shape) {
    case NS_LOG_DENSITY_COLUMN:
        return dconst(x);
    case NS_GAUSSIAN: {
        Dual t = (dconst(x) - a[0]) / a[1];
        return t * t * -0.5;
    }
    case NS_EXPONENTIAL:
        return a[0] * -(x - lo);
    case NS_CB_ONE_SIDED: {
        Dual t = (dconst(x) - a[0]) / a[1];
        bool left = a[2].v >= 0.0;
        Dual alpha = dabs(a[2]);
        bool tail = left ? (x < a[0].v && -t.v > alpha.v) : (x >= a[0].v && t.v > alpha.v);
        return tail ? cb_tail(alpha, a[3], dabs(t)) : t * t * -0.5;
    }
    case NS_CB_TWO_SIDED: {
        bool below = x < a[0].v;
        Dual t = (dconst(x) - a[0]) / (below ? a[1] : a[2]);
        bool has = below ? (flags & 1) : (flags & 2);
        Dual alpha = below ? a[3] : a[5];
        Dual n = below ? a[4] : a[6];
        return (has && dabs(t).v > alpha.v) ? cb_tail(alpha, n, dabs(t)) : t * t * -0.5;
    }
    case NS_ARGUS: {
        Dual r = dconst(x) / a[0];
        Dual u = -(r * r) + 1.0;
        if (u.v <= 0.0 || x <= 0.0) return dconst(-__longlong_as_double(0x7ff0000000000000LL));
        return dlog(u) * a[2] + a[1] * u + log(x);
    }
    case NS_CHEBYCHEV: {
        double u = (2.0 * x - (lo + hi)) / (hi - lo);
        double tkm1 = 1.0, tk = u;
        Dual sum = dconst(1.0);
        for (int i = 0; i < flags; i++) {
            sum = sum + a[i] * tk;
            double next = 2.0 * u * tk - tkm1;
            tkm1 = tk; tk = next;
        }
        return dlog(sum);
    }
    case NS_POLYNOMIAL: {
        Dual sum = dconst(0.0);
        for (int i = flags - 1; i >= 0; i--) sum = sum * x + a[i];
        return dlog(sum);
    }
    default: {
        double w = (h_hi - h_lo) / nbins;
        if (!(x >= h_lo && x <= h_hi)) return dconst(-__longlong_as_double(0x7ff0000000000000LL));
        int b = min((int)((x - h_lo) / w), nbins - 1);
        return dconst(log(hist[b] / w));
    }
    }
}

// The value of `arr` at a run-time index, by a compile-time scan (keeps `arr` in registers).
__device__ __forceinline__ double pick(const double* arr, int idx) {
    double r = 0.0;
    #pragma unroll
    for (int k = 0; k < NS_NODES; k++) if (k == idx) r = arr[k];
    return r;
}

extern "C" __global__ void __launch_bounds__(NS_BLOCK) event_sums(
    const double* states, int state_len, const double* hist,
    const double* events, const long long* offsets, const long long* counts,
    const int* weighted, const int* row_dataset, int dims, double* partials) {
    // The tree, in arena order (children before parents): kind 0 leaf, 1 product, 2 mixture.
    constexpr int kind[NS_NODES] = NS_KIND;
    constexpr int shape[NS_NODES] = NS_SHAPE;
    constexpr int flags[NS_NODES] = NS_FLAGS;
    constexpr int column[NS_NODES] = NS_COLUMN;
    constexpr int n_args[NS_NODES] = NS_NARGS;
    constexpr int first_child[NS_NODES] = NS_FIRST_CHILD;
    constexpr int n_children[NS_NODES] = NS_NCHILD;
    constexpr int state_at[NS_NODES] = NS_STATE_AT;
    constexpr int sum_at[NS_NODES] = NS_SUM_AT;
    constexpr int children[] = NS_CHILDREN;

    const int row = blockIdx.y;
    const int dataset = row_dataset[row];
    const double* state = states + (long long)row * state_len;
    const long long n = counts[dataset];
    const double* cols = events + offsets[dataset];
    const double* w = weighted[dataset] ? cols + (long long)dims * n : nullptr;

    // A row's blocks depend on its own event count only (at least NS_EVENTS_PER_THREAD events a
    // thread), never on the batch it is in: its sums are the same bits in any batch. Blocks
    // beyond leave their (zeroed) partials alone.
    const long long per_block = (long long)NS_BLOCK * NS_EVENTS_PER_THREAD;
    const long long blocks = min((long long)gridDim.x, max(1LL, (n + per_block - 1) / per_block));
    if (blockIdx.x >= blocks) return;

    double acc[NS_SUMS + 1];
    #pragma unroll
    for (int s = 0; s <= NS_SUMS; s++) acc[s] = 0.0;

    for (long long e = (long long)blockIdx.x * NS_BLOCK + threadIdx.x; e < n;
         e += blocks * NS_BLOCK) {
        double val[NS_NODES], adj[NS_NODES];
        double dlg[NS_NODES][NS_MAX_ARGS];
        #pragma unroll
        for (int i = 0; i < NS_NODES; i++) {
            adj[i] = 0.0;
            if (kind[i] == NS_LEAF) {
                const double* st = state + state_at[i];
                const int k = n_args[i];
                Dual a[NS_MAX_ARGS];
                #pragma unroll
                for (int j = 0; j < NS_MAX_ARGS; j++) a[j] = j < k ? dinput(st[j], j) : dconst(0.0);
                const double* h = shape[i] == NS_HISTOGRAM ? hist + (long long)st[k + 6] : hist;
                int nb = shape[i] == NS_HISTOGRAM ? (int)st[k + 5] : 1;
                Dual l = log_density(shape[i], flags[i], cols[(long long)column[i] * n + e], a,
                                     st[k + 1], st[k + 2], h, nb, st[k + 3], st[k + 4]);
                val[i] = exp(l.v - st[k]);
                #pragma unroll
                for (int j = 0; j < NS_MAX_ARGS; j++) dlg[i][j] = l.d[j];
            } else if (kind[i] == NS_PRODUCT) {
                double v = 1.0;
                #pragma unroll
                for (int c = 0; c < n_children[i]; c++) v *= pick(val, children[first_child[i] + c]);
                val[i] = v;
            } else {
                double v = 0.0;
                #pragma unroll
                for (int c = 0; c < n_children[i]; c++) v += state[state_at[i] + c] * pick(val, children[first_child[i] + c]);
                val[i] = v;
            }
        }
        const int root = NS_NODES - 1;
        const double we = w ? w[e] : 1.0;
        acc[NS_SUMS] += we * log(val[root]);
        adj[root] = we / val[root];
        #pragma unroll
        for (int i = NS_NODES - 1; i >= 0; i--) {
            const double ad = adj[i];
            if (kind[i] == NS_LEAF) {
                const double av = ad * val[i];
                #pragma unroll
                for (int j = 0; j < NS_MAX_ARGS; j++) if (j < n_args[i]) acc[sum_at[i] + j] += av * dlg[i][j];
                acc[sum_at[i] + n_args[i]] += av;
            } else if (kind[i] == NS_MIXTURE) {
                #pragma unroll
                for (int c = 0; c < n_children[i]; c++) {
                    const int ch = children[first_child[i] + c];
                    acc[sum_at[i] + c] += ad * pick(val, ch);
                    const double coef = state[state_at[i] + c];
                    #pragma unroll
                    for (int k = 0; k < NS_NODES; k++) if (k == ch) adj[k] += coef * ad;
                }
            } else {
                #pragma unroll
                for (int c = 0; c < n_children[i]; c++) {
                    const int ch = children[first_child[i] + c];
                    double others = 1.0;
                    #pragma unroll
                    for (int o = 0; o < n_children[i]; o++)
                        if (o != c) others *= pick(val, children[first_child[i] + o]);
                    #pragma unroll
                    for (int k = 0; k < NS_NODES; k++) if (k == ch) adj[k] += ad * others;
                }
            }
        }
    }

    // Block reduction, one sum after the other, in a fixed tree.
    __shared__ double red[NS_BLOCK];
    double* out = partials + ((long long)row * gridDim.x + blockIdx.x) * (NS_SUMS + 1);
    #pragma unroll
    for (int s = 0; s <= NS_SUMS; s++) {
        red[threadIdx.x] = acc[s];
        __syncthreads();
        for (int stride = NS_BLOCK / 2; stride > 0; stride >>= 1) {
            if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
            __syncthreads();
        }
        if (threadIdx.x == 0) out[s] = red[0];
        __syncthreads();
    }
}
