// Fused NLL (deviance form: without the data-only constant) and analytic gradient of the
// compiled model in f32, for a batch of evaluations: a port of kernels/nll_grad.cu. One workgroup
// per evaluation (strided over the batch); its threads share the evaluation's intermediates in a
// per-workgroup scratch area.
//
// Precision: the Poisson terms are deviances n ln(n/λ) + λ − n around the observed count (a
// series where n ≈ λ), so the sum is O(χ²) rather than O(Σ n ln n); the data-only constant is
// added on the host in f64. Sums are over a fixed set of items in a fixed order — a thread's own
// items in index order, then a fixed tree over the workgroup — and no atomics are used, so a
// result is the same run after run on one adapter.
//
// The model's arrays are packed into one u32 and one f32 buffer (portable within the 8 storage
// buffers every adapter offers); `m` holds each array's offset and the counts
// (ns_compute::wgpu::layout writes it).

struct Meta {
    n_params: u32,
    n_main: u32,
    n_aux: u32,
    n_blocks: u32,
    n_entries: u32,
    n_scalar: u32,
    n_histosys: u32,
    n_entry_factors: u32,
    n_gauss: u32,
    n_pois: u32,
    normsys_code: u32,
    histosys_code: u32,
    n_eval: u32,
    scratch_stride: u32,
    // Offsets into `ints`.
    blocks: u32,
    entry_factor_start: u32,
    entry_factor_param: u32,
    entry_block: u32,
    scalar_param: u32,
    scalar_normsys: u32,
    histosys_param: u32,
    histosys_block: u32,
    bin_entry_start: u32,
    bin_entries: u32,
    gauss_param: u32,
    gauss_aux: u32,
    pois_param: u32,
    pois_aux: u32,
    param_slot_start: u32,
    param_slots: u32,
    // Offsets into `reals`.
    nominal: u32,
    normsys: u32,
    histosys_delta: u32,
    gauss_sigma: u32,
    pois_tau: u32,
    _pad: u32,
}

const THREADS: u32 = 128u;
const BLOCK_WORDS: u32 = 8u;
const NORMSYS_WORDS: u32 = 8u;
const LINEAR: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> m: Meta;
@group(0) @binding(1) var<storage, read> ints: array<u32>;
@group(0) @binding(2) var<storage, read> reals: array<f32>;
// Row ev: the parameters of evaluation ev.
@group(0) @binding(3) var<storage, read> params: array<f32>;
// Row d: main data then auxiliary data of dataset d.
@group(0) @binding(4) var<storage, read> data: array<f32>;
@group(0) @binding(5) var<storage, read> eval_dataset: array<u32>;
@group(0) @binding(6) var<storage, read_write> scratch: array<f32>;
// Row ev: the NLL, then its gradient (1 + n_params values).
@group(0) @binding(7) var<storage, read_write> result: array<f32>;

var<workgroup> red: array<f32, 128>;

// Poisson deviance n ln(n/λ) + λ − n (ns_compute::poisson::poisson_deviance): a series in
// v = (n−λ)/(n+λ) where the two halves cancel.
fn deviance(n: f32, lambda: f32) -> f32 {
    if (n == 0.0) {
        return lambda;
    }
    let d = n - lambda;
    if (abs(d) < 0.1 * (n + lambda)) {
        let v = d / (n + lambda);
        let v2 = v * v;
        var sum = d * v;
        var term = 2.0 * n * v;
        var k = 3.0;
        for (var i = 0; i < 64; i++) {
            term *= v2;
            let next = sum + term / k;
            if (next == sum) {
                break;
            }
            sum = next;
            k += 2.0;
        }
        return sum;
    }
    return n * (log(n) - log(lambda)) + lambda - n;
}

// Normsys factor and slope at alpha (ns_core::NormsysTerm::factor_and_derivative): term t's
// ln_hi, ln_lo and code-4 polynomial.
fn normsys(t: u32, alpha: f32) -> vec2<f32> {
    let base = m.normsys + NORMSYS_WORDS * t;
    if (m.normsys_code == 4u && alpha < 1.0 && alpha > -1.0) {
        let p0 = reals[base + 2u];
        let p1 = reals[base + 3u];
        let p2 = reals[base + 4u];
        let p3 = reals[base + 5u];
        let p4 = reals[base + 6u];
        let p5 = reals[base + 7u];
        let value = 1.0 + alpha * (p0 + alpha * (p1 + alpha * (p2 + alpha * (p3 + alpha * (p4 + alpha * p5)))));
        let slope = p0 + alpha * (2.0 * p1 + alpha * (3.0 * p2 + alpha * (4.0 * p3 + alpha * (5.0 * p4 + alpha * 6.0 * p5))));
        return vec2<f32>(value, slope);
    }
    if (alpha > 0.0) {
        let f = exp(alpha * reals[base]);
        return vec2<f32>(f, f * reals[base]);
    }
    let f = exp(-alpha * reals[base + 1u]);
    return vec2<f32>(f, -f * reals[base + 1u]);
}

// Histosys weights (w_up, w_down, s_up, s_down) at a (ns_core::HistosysWeights::new).
fn histosys_weights(a: f32) -> vec4<f32> {
    if (m.histosys_code == 0u) {
        if (a > 0.0) {
            return vec4<f32>(a, 0.0, 1.0, 0.0);
        }
        return vec4<f32>(0.0, a, 0.0, 1.0);
    }
    if (m.histosys_code == 2u) {
        if (a > 1.0) {
            return vec4<f32>(1.5 * (a - 1.0), -0.5 * (a - 1.0), 1.5, -0.5);
        }
        if (a >= -1.0) {
            let q = 0.5 * a * a;
            let l = 0.5 * a;
            return vec4<f32>(q + l, l - q, a + 0.5, 0.5 - a);
        }
        return vec4<f32>(-0.5 * a, 1.5 * a, -0.5, 1.5);
    }
    if (a > 1.0) {
        return vec4<f32>(a, 0.0, 1.0, 0.0);
    }
    if (a < -1.0) {
        return vec4<f32>(0.0, a, 0.0, 1.0);
    }
    let a2 = a * a;
    let poly = a2 * (a2 * (3.0 * a2 - 10.0) + 15.0) * 0.0625;
    let dpoly = a * (a2 * (18.0 * a2 - 40.0) + 30.0) * 0.0625;
    return vec4<f32>(poly + 0.5 * a, 0.5 * a - poly, dpoly + 0.5, 0.5 - dpoly);
}

// One value per thread summed over the workgroup by a fixed tree; every thread gets the total.
fn workgroup_sum(v: f32, tid: u32) -> f32 {
    workgroupBarrier();
    red[tid] = v;
    workgroupBarrier();
    for (var width = THREADS / 2u; width > 0u; width /= 2u) {
        if (tid < width) {
            red[tid] += red[tid + width];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

fn block_word(b: u32, k: u32) -> u32 {
    return ints[m.blocks + BLOCK_WORDS * b + k];
}

@compute @workgroup_size(128)
fn nll_grad(@builtin(local_invocation_index) tid: u32,
            @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) groups: vec3<u32>) {
    let s0 = wid.x * m.scratch_stride;
    // Scratch layout (ns_scratch_stride in nll_grad.cu).
    let scalar_value = s0;
    let scalar_slope = scalar_value + m.n_scalar;
    let block_scale = scalar_slope + m.n_scalar;
    let base = block_scale + m.n_blocks;
    let product = base + m.n_entries;
    let bin_weight = product + m.n_entries;
    let contrib = bin_weight + m.n_main;
    let histosys_slot0 = m.n_scalar;
    let entry_slot0 = histosys_slot0 + m.n_histosys;
    let gauss_slot0 = entry_slot0 + m.n_entry_factors;
    let pois_slot0 = gauss_slot0 + m.n_gauss;
    let np = m.n_params;

    for (var ev = wid.x; ev < m.n_eval; ev += groups.x) {
        let p0 = ev * np;
        let d = eval_dataset[ev];
        let obs0 = d * (m.n_main + m.n_aux);
        let aux0 = obs0 + m.n_main;

        // 1. Scalar factors.
        for (var k = tid; k < m.n_scalar; k += THREADS) {
            let theta = params[p0 + ints[m.scalar_param + k]];
            let term = ints[m.scalar_normsys + k];
            if (term == LINEAR) {
                scratch[scalar_value + k] = theta;
                scratch[scalar_slope + k] = 1.0;
            } else {
                let f = normsys(term, theta);
                scratch[scalar_value + k] = f.x;
                scratch[scalar_slope + k] = f.y;
            }
        }
        workgroupBarrier();

        // 2. Per-sample scale, per-entry base yield and entry-factor product.
        for (var b = tid; b < m.n_blocks; b += THREADS) {
            var scale = 1.0;
            for (var k = block_word(b, 3u); k < block_word(b, 4u); k++) {
                scale *= scratch[scalar_value + k];
            }
            scratch[block_scale + b] = scale;
        }
        for (var e = tid; e < m.n_entries; e += THREADS) {
            let b = ints[m.entry_block + e];
            let h0 = block_word(b, 5u);
            let nh = block_word(b, 6u) - h0;
            let row = m.histosys_delta + block_word(b, 7u) + (e - block_word(b, 2u)) * 2u * nh;
            var acc = reals[m.nominal + e];
            for (var j = 0u; j < nh; j++) {
                let w = histosys_weights(params[p0 + ints[m.histosys_param + h0 + j]]);
                acc += w.x * reals[row + 2u * j] + w.y * reals[row + 2u * j + 1u];
            }
            scratch[base + e] = acc;
            var prod = 1.0;
            for (var f = ints[m.entry_factor_start + e]; f < ints[m.entry_factor_start + e + 1u]; f++) {
                prod *= params[p0 + ints[m.entry_factor_param + f]];
            }
            scratch[product + e] = prod;
        }
        workgroupBarrier();

        // 3. Expected data, the NLL terms and d NLL / d expected.
        var local = 0.0;
        for (var b = tid; b < m.n_main; b += THREADS) {
            var lambda = 0.0;
            for (var i = ints[m.bin_entry_start + b]; i < ints[m.bin_entry_start + b + 1u]; i++) {
                let e = ints[m.bin_entries + i];
                lambda += scratch[base + e] * scratch[block_scale + ints[m.entry_block + e]] * scratch[product + e];
            }
            let n = data[obs0 + b];
            local += deviance(n, lambda);
            scratch[bin_weight + b] = select(1.0 - n / lambda, 1.0, n == 0.0);
        }
        for (var c = tid; c < m.n_gauss; c += THREADS) {
            let pull = (data[aux0 + ints[m.gauss_aux + c]] - params[p0 + ints[m.gauss_param + c]]) / reals[m.gauss_sigma + c];
            local += 0.5 * pull * pull;
        }
        for (var c = tid; c < m.n_pois; c += THREADS) {
            local += deviance(data[aux0 + ints[m.pois_aux + c]], params[p0 + ints[m.pois_param + c]] * reals[m.pois_tau + c]);
        }
        let nll = workgroup_sum(local, tid);

        // 4. Gradient contributions, one slot per term.
        for (var b = tid; b < m.n_blocks; b += THREADS) {
            let k0 = block_word(b, 3u);
            let k1 = block_word(b, 4u);
            if (k1 == k0) {
                continue;
            }
            var unscaled = 0.0;
            for (var i = 0u; i < block_word(b, 1u); i++) {
                let e = block_word(b, 2u) + i;
                unscaled += scratch[bin_weight + block_word(b, 0u) + i] * scratch[product + e] * scratch[base + e];
            }
            // Product rule without division: suffix products into the block's own slots first,
            // then one forward pass with the prefix product.
            var suffix = 1.0;
            for (var k = k1; k > k0; k--) {
                suffix *= scratch[scalar_value + k - 1u];
                scratch[contrib + k - 1u] = suffix;
            }
            var prefix = 1.0;
            for (var k = k0; k < k1; k++) {
                let after = select(1.0, scratch[contrib + k + 1u], k + 1u < k1);
                let value = scratch[scalar_value + k];
                scratch[contrib + k] = unscaled * prefix * after * scratch[scalar_slope + k];
                prefix *= value;
            }
        }
        for (var h = tid; h < m.n_histosys; h += THREADS) {
            let b = ints[m.histosys_block + h];
            let j = h - block_word(b, 5u);
            let nh = block_word(b, 6u) - block_word(b, 5u);
            let col = m.histosys_delta + block_word(b, 7u) + 2u * j;
            var sum_up = 0.0;
            var sum_down = 0.0;
            for (var i = 0u; i < block_word(b, 1u); i++) {
                let w = scratch[bin_weight + block_word(b, 0u) + i] * scratch[product + block_word(b, 2u) + i];
                sum_up += w * reals[col + i * 2u * nh];
                sum_down += w * reals[col + i * 2u * nh + 1u];
            }
            let hw = histosys_weights(params[p0 + ints[m.histosys_param + h]]);
            scratch[contrib + histosys_slot0 + h] = scratch[block_scale + b] * (hw.z * sum_up + hw.w * sum_down);
        }
        for (var e = tid; e < m.n_entries; e += THREADS) {
            let f0 = ints[m.entry_factor_start + e];
            let f1 = ints[m.entry_factor_start + e + 1u];
            if (f1 == f0) {
                continue;
            }
            let b = ints[m.entry_block + e];
            let outer = scratch[bin_weight + block_word(b, 0u) + (e - block_word(b, 2u))] * scratch[base + e] * scratch[block_scale + b];
            for (var f = f0; f < f1; f++) {
                var others = 1.0;
                for (var g = f0; g < f1; g++) {
                    if (g != f) {
                        others *= params[p0 + ints[m.entry_factor_param + g]];
                    }
                }
                scratch[contrib + entry_slot0 + f] = outer * others;
            }
        }
        for (var c = tid; c < m.n_gauss; c += THREADS) {
            let s = reals[m.gauss_sigma + c];
            scratch[contrib + gauss_slot0 + c] = (params[p0 + ints[m.gauss_param + c]] - data[aux0 + ints[m.gauss_aux + c]]) / (s * s);
        }
        for (var c = tid; c < m.n_pois; c += THREADS) {
            let observed = data[aux0 + ints[m.pois_aux + c]];
            let tau = reals[m.pois_tau + c];
            scratch[contrib + pois_slot0 + c] = select(tau - observed / params[p0 + ints[m.pois_param + c]], tau, observed == 0.0);
        }
        workgroupBarrier();

        // 5. Gather: each parameter sums its slots in ascending order, one thread per parameter.
        let r0 = ev * (1u + np);
        for (var q = tid; q < np; q += THREADS) {
            var sum = 0.0;
            for (var s = ints[m.param_slot_start + q]; s < ints[m.param_slot_start + q + 1u]; s++) {
                sum += scratch[contrib + ints[m.param_slots + s]];
            }
            result[r0 + 1u + q] = sum;
        }
        if (tid == 0u) {
            result[r0] = nll;
        }
        workgroupBarrier();
    }
}
