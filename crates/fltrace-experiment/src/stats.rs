//! Statistics of repeated runs: mean, standard deviation, and the overhead of one
//! configuration against another as a ratio of mean run times with a confidence interval.
//!
//! The interval is Welch's t interval carried to the ratio by the delta method on the log
//! scale: the variance of the ratio's logarithm is the sum of the two means' relative
//! variances (`s1²/(n1·m1²) + s0²/(n0·m0²)`), with Welch-Satterthwaite degrees of freedom on
//! those two terms, and the bounds are `ratio · exp(∓ t(df) · sqrt(that sum))`: a ratio of
//! times is never below zero, however noisy a sample (the linear interval gave
//! `-0.232..11.764`).

use serde::Serialize;

/// Mean, sample standard deviation, minimum and maximum of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SampleStats {
    /// Sample size.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for a single value.
    pub sd: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// Summarizes `values`; `None` if there are none.
pub fn summarize(values: &[f64]) -> Option<SampleStats> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(SampleStats {
        n,
        mean,
        sd,
        min,
        max,
    })
}

/// A ratio of means with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    /// `mean(numerator) / mean(denominator)`.
    pub ratio: f64,
    /// Lower bound of the interval; `None` when a sample has fewer than two values.
    pub low: Option<f64>,
    /// Upper bound.
    pub high: Option<f64>,
}

/// The ratio of the means of `numerator` and `denominator` with a `confidence` (e.g. 0.95)
/// interval (see the module's documentation). `None` if the denominator's mean is 0.
pub fn ratio_of_means(
    numerator: &SampleStats,
    denominator: &SampleStats,
    confidence: f64,
) -> Option<Ratio> {
    if denominator.mean == 0.0 || !denominator.mean.is_finite() {
        return None;
    }
    let ratio = numerator.mean / denominator.mean;
    if numerator.n < 2 || denominator.n < 2 || numerator.mean == 0.0 {
        return Some(Ratio {
            ratio,
            low: None,
            high: None,
        });
    }
    let relative = |s: &SampleStats| s.sd * s.sd / (s.n as f64 * s.mean * s.mean);
    let (a, b) = (relative(numerator), relative(denominator));
    if a + b == 0.0 {
        return Some(Ratio {
            ratio,
            low: Some(ratio),
            high: Some(ratio),
        });
    }
    let df =
        (a + b).powi(2) / (a * a / (numerator.n - 1) as f64 + b * b / (denominator.n - 1) as f64);
    let spread = t_quantile(0.5 + confidence / 2.0, df) * (a + b).sqrt();
    if ratio > 0.0 {
        return Some(Ratio {
            ratio,
            low: Some(ratio * (-spread).exp()),
            high: Some(ratio * spread.exp()),
        });
    }
    // Means of both signs have no logarithm: the linear interval.
    let half = spread * ratio.abs();
    Some(Ratio {
        ratio,
        low: Some(ratio - half),
        high: Some(ratio + half),
    })
}

/// The `p` quantile (0.5 < p < 1) of Student's t distribution with `df` degrees of freedom
/// (not necessarily whole), by bisection on its distribution function.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let cdf = |t: f64| 1.0 - 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    let mut high = 1.0;
    while cdf(high) < p && high < 1e12 {
        high *= 2.0;
    }
    let mut low = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if cdf(mid) < p {
            low = mid;
        } else {
            high = mid;
        }
    }
    0.5 * (low + high)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = C[0];
    for (i, c) in C.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularized incomplete beta function I_x(a, b).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    // The continued fraction converges fast on this side; use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of the incomplete beta function (modified Lentz).
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..500 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let even = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + even * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + even / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + odd * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + odd / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-16 {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1.0)
    }

    #[test]
    fn summary_of_known_values() {
        let s = summarize(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!((s.n, s.mean, s.min, s.max), (5, 3.0, 1.0, 5.0));
        assert_eq!(s.sd, 2.5f64.sqrt());
        let one = summarize(&[7.5]).unwrap();
        assert_eq!((one.mean, one.sd), (7.5, 0.0));
        assert!(summarize(&[]).is_none());
    }

    /// Against published two-sided 95% critical values.
    #[test]
    fn t_quantiles_match_tables() {
        for (df, t) in [
            (1.0, 12.706204736174698),
            (2.0, 4.302652729749464),
            (4.0, 2.7764451051977934),
            (10.0, 2.2281388519862744),
            (30.0, 2.0422724563012373),
            (1000.0, 1.9623390808264074),
        ] {
            let q = t_quantile(0.975, df);
            assert!(close(q, t, 1e-9), "df {df}: {q} against {t}");
        }
    }

    #[test]
    fn overhead_interval_of_known_samples() {
        let slow = summarize(&[2.0, 4.0, 6.0]).unwrap();
        let fast = summarize(&[1.0, 2.0, 3.0]).unwrap();
        let r = ratio_of_means(&slow, &fast, 0.95).unwrap();
        assert_eq!(r.ratio, 2.0);
        // Relative variances 4/(3*16) and 1/(3*4), both 1/12: df = 4, and the log-scale
        // spread is t(0.975, 4) * sqrt(1/6).
        let spread = 2.7764451051977934 * (1.0f64 / 6.0).sqrt();
        assert!(close(r.low.unwrap(), 2.0 * (-spread).exp(), 1e-9), "{r:?}");
        assert!(close(r.high.unwrap(), 2.0 * spread.exp(), 1e-9), "{r:?}");
    }

    #[test]
    fn a_very_noisy_configuration_stays_above_zero() {
        // One run 20 times the others: the linear interval went below zero.
        let noisy = summarize(&[0.1, 0.1, 2.0]).unwrap();
        let quiet = summarize(&[0.1, 0.11, 0.1]).unwrap();
        let r = ratio_of_means(&noisy, &quiet, 0.95).unwrap();
        let (low, high) = (r.low.unwrap(), r.high.unwrap());
        assert!(low > 0.0 && low < r.ratio && r.ratio < high, "{r:?}");
        // The log-scale interval is symmetric in ratio terms: low * high = ratio².
        assert!(close(low * high, r.ratio * r.ratio, 1e-9), "{r:?}");
    }

    #[test]
    fn a_configuration_against_itself_is_exactly_one() {
        let s = summarize(&[0.123, 0.131, 0.127]).unwrap();
        let r = ratio_of_means(&s, &s, 0.95).unwrap();
        assert_eq!(r.ratio, 1.0);
        assert!(r.low.unwrap() < 1.0 && r.high.unwrap() > 1.0);
        let constant = summarize(&[3.0, 3.0]).unwrap();
        let r = ratio_of_means(&constant, &constant, 0.95).unwrap();
        assert_eq!((r.ratio, r.low, r.high), (1.0, Some(1.0), Some(1.0)));
        let single = summarize(&[3.0]).unwrap();
        assert_eq!(ratio_of_means(&single, &constant, 0.95).unwrap().low, None);
        let zero = summarize(&[0.0, 0.0]).unwrap();
        assert!(ratio_of_means(&s, &zero, 0.95).is_none());
    }
}
