// CUDA twin of src/detmath.rs, line for line: elementary functions from correctly rounded IEEE
// operations only. Compiled with --fmad=false, so every product and sum rounds exactly as on the
// CPU and toy datasets are bit-identical on both. Its constants (NS_LN2_HI, NS_LN2_LO,
// NS_INV_LN2, NS_PI, NS_SQRT_2) are detmath.rs's, written into the generated header (abi.rs).

__device__ double ns_pow2(long long k) {
    return __longlong_as_double((k + 1023) << 52);
}

__device__ double ns_exp(double x) {
    if (isnan(x)) return x;
    if (x > 709.78) return __longlong_as_double(0x7ff0000000000000LL);
    if (x < -745.2) return 0.0;
    double k = floor(x * NS_INV_LN2 + 0.5);
    double r = (x - k * NS_LN2_HI) - k * NS_LN2_LO;
    const double d[14] = {6227020800.0, 479001600.0, 39916800.0, 3628800.0, 362880.0, 40320.0,
                          5040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0};
    double p = 1.0 / 87178291200.0;
    for (int i = 0; i < 14; ++i) p = p * r + 1.0 / d[i];
    long long ki = (long long)k;
    long long half = ki / 2;
    return p * ns_pow2(half) * ns_pow2(ki - half);
}

__device__ double ns_ln(double x) {
    if (isnan(x) || x < 0.0) return __longlong_as_double(0x7ff8000000000000LL);
    if (x == 0.0) return __longlong_as_double(0xfff0000000000000LL);
    if (isinf(x)) return x;
    unsigned long long bits = (unsigned long long)__double_as_longlong(x);
    long long e = 0;
    if ((bits >> 52) == 0) {
        bits = (unsigned long long)__double_as_longlong(x * 18014398509481984.0);
        e = -54;
    }
    e += (long long)((bits >> 52) & 0x7ff) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL));
    if (m > NS_SQRT_2) {
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    const double d[11] = {21.0, 19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0};
    double p = 1.0 / 23.0;
    for (int i = 0; i < 11; ++i) p = p * s2 + 1.0 / d[i];
    double ef = (double)e;
    return ef * NS_LN2_HI + (2.0 * s * p + ef * NS_LN2_LO);
}

__device__ void ns_sin_cos_reduced(double x, double* sin_out, double* cos_out) {
    double x2 = x * x;
    const double ds[7] = {6227020800.0, -39916800.0, 362880.0, -5040.0, 120.0, -6.0, 1.0};
    double s = -1.0 / 1307674368000.0;
    for (int i = 0; i < 7; ++i) s = s * x2 + 1.0 / ds[i];
    const double dc[8] = {-87178291200.0, 479001600.0, -3628800.0, 40320.0, -720.0, 24.0, -2.0, 1.0};
    double c = 1.0 / 20922789888000.0;
    for (int i = 0; i < 8; ++i) c = c * x2 + 1.0 / dc[i];
    *sin_out = x * s;
    *cos_out = c;
}

__device__ double ns_cos_2pi(double t) {
    t = t - floor(t);
    double quarter = floor(4.0 * t + 0.5);
    double x = (t - 0.25 * quarter) * (2.0 * NS_PI);
    double s, c;
    ns_sin_cos_reduced(x, &s, &c);
    switch (((long long)quarter) & 3) {
        case 0: return c;
        case 1: return -s;
        case 2: return -c;
        default: return s;
    }
}

__device__ double ns_stirling_ln_gamma(double x) {
    double inv = 1.0 / x;
    double inv2 = inv * inv;
    double series = inv * (1.0 / 12.0 + inv2 * (-1.0 / 360.0 + inv2 * (1.0 / 1260.0 + inv2 * (-1.0 / 1680.0 + inv2 / 1188.0))));
    return (x - 0.5) * ns_ln(x) - x + 0.9189385332046726695 + series;
}

__device__ double ns_ln_factorial(double k) {
    if (k < 20.0) {
        double f = 1.0;
        for (double i = 2.0; i <= k; i += 1.0) f *= i;
        return ns_ln(f);
    }
    return ns_stirling_ln_gamma(k + 1.0);
}

__device__ double ns_ln_gamma_1p(double t) {
    double x = t + 1.0, product = 1.0;
    while (x < 20.0) {
        product *= x;
        x += 1.0;
    }
    return ns_stirling_ln_gamma(x) - ns_ln(product);
}
