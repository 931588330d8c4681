//! The statistics the report computes: percentiles and medians over rounds, and ratios and
//! differences taken pair by pair within a round.
//!
//! Why pairs: a machine's speed drifts between runs (and, on a shared machine, between minutes),
//! so an absolute figure from one round is only comparable with another contender's figure from
//! the *same* round, taken seconds apart. The headline ratios are therefore the median of the
//! per-round ratios, never the ratio of two medians taken over different moments.

/// The `q`-th percentile (`0.0..=100.0`) of `values`, interpolating linearly between the two
/// nearest ranks (Hyndman & Fan type 7, what numpy and R use by default).
///
/// Returns `None` for an empty slice or a `q` outside `0..=100`; NaN values are ignored.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if !(0.0..=100.0).contains(&q) {
        return None;
    }
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The median of `values` (`None` when empty): the mean of the two middle values for an even
/// count.
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// `a[i] / b[i]` for each round `i` in which both figures exist and `b[i]` is not zero.
///
/// Rounds are matched by index: `a` and `b` must come from the same rounds in the same order. A
/// round missing on either side (`None`, e.g. a contender that failed that round) is skipped
/// rather than paired with another round's figure.
pub fn paired_ratios(a: &[Option<f64>], b: &[Option<f64>]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| match (x, y) {
            (Some(x), Some(y)) if *y != 0.0 && x.is_finite() && y.is_finite() => Some(x / y),
            _ => None,
        })
        .collect()
}

/// `a[i] - b[i]` for each round in which both figures exist (see [`paired_ratios`]).
pub fn paired_differences(a: &[Option<f64>], b: &[Option<f64>]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| match (x, y) {
            (Some(x), Some(y)) if x.is_finite() && y.is_finite() => Some(x - y),
            _ => None,
        })
        .collect()
}

/// The median of the per-round ratios `a / b` (`None` when no round has both).
pub fn median_ratio(a: &[Option<f64>], b: &[Option<f64>]) -> Option<f64> {
    median(&paired_ratios(a, b))
}

/// The median of the per-round differences `a - b` (`None` when no round has both).
pub fn median_difference(a: &[Option<f64>], b: &[Option<f64>]) -> Option<f64> {
    median(&paired_differences(a, b))
}

/// The median of the figures that exist.
pub fn median_of(values: &[Option<f64>]) -> Option<f64> {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    median(&present)
}

/// How far the figures spread around their median, as `(max - min) / median` (`None` with fewer
/// than two figures or a zero median): the report flags a contender whose rounds disagree.
pub fn relative_spread(values: &[Option<f64>]) -> Option<f64> {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    if present.len() < 2 {
        return None;
    }
    let m = median(&present)?;
    if m == 0.0 {
        return None;
    }
    let lo = present.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = present.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((hi - lo) / m)
}

/// CPU seconds per 10,000 requests; `None` when no request completed.
pub fn cpu_per_10k(cpu_seconds: f64, requests: u64) -> Option<f64> {
    (requests > 0).then(|| cpu_seconds * 10_000.0 / requests as f64)
}

/// The most a proxy could reach against a reference proxy sharing its CPU with the upstream, if
/// it spent no user time at all and as much kernel time per request as the reference: per
/// request the CPU pays for the proxy and the upstream, so the rate scales with
/// (reference CPU + upstream CPU) ÷ (reference kernel CPU + upstream CPU). All per request (or
/// per 10k requests, alike).
pub fn kernel_ceiling(reference_cpu: f64, reference_kernel: f64, upstream_cpu: f64) -> Option<f64> {
    let floor = reference_kernel + upstream_cpu;
    (floor > 0.0 && reference_cpu >= reference_kernel)
        .then(|| (reference_cpu + upstream_cpu) / floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn percentile_interpolates_between_ranks_like_numpy() {
        let v = [15.0, 20.0, 35.0, 40.0, 50.0];
        assert_eq!(percentile(&v, 0.0), Some(15.0));
        assert_eq!(percentile(&v, 100.0), Some(50.0));
        assert_eq!(percentile(&v, 50.0), Some(35.0));
        // numpy.percentile([15, 20, 35, 40, 50], 40) == 29.0
        assert!(close(percentile(&v, 40.0).unwrap(), 29.0));
        // numpy.percentile(range(1, 1001), 99.9) == 999.001
        let many: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert!(close(percentile(&many, 99.9).unwrap(), 999.001));
        assert!(close(percentile(&many, 99.0).unwrap(), 990.01));
    }

    #[test]
    fn percentile_does_not_depend_on_input_order() {
        let a = [3.0, 1.0, 2.0, 5.0, 4.0];
        let b = [1.0, 2.0, 3.0, 4.0, 5.0];
        for q in [0.0, 10.0, 50.0, 90.0, 99.0, 100.0] {
            assert_eq!(percentile(&a, q), percentile(&b, q));
        }
    }

    #[test]
    fn percentile_of_nothing_or_out_of_range_is_none() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[f64::NAN], 50.0), None);
        assert_eq!(percentile(&[1.0], 101.0), None);
        assert_eq!(percentile(&[1.0], -1.0), None);
        assert_eq!(percentile(&[7.0], 99.9), Some(7.0));
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(
            median_of(&[Some(9.0), None, Some(1.0), Some(5.0)]),
            Some(5.0)
        );
        assert_eq!(median_of(&[None, None]), None);
    }

    #[test]
    fn ratios_are_taken_within_each_round_not_across_rounds() {
        // The machine slows down by half in round 2: each contender's absolute figure halves,
        // the ratio within each round stays 0.8. A ratio of medians would mix rounds.
        let a = [Some(80.0), Some(40.0), Some(80.0)];
        let b = [Some(100.0), Some(50.0), Some(100.0)];
        assert_eq!(paired_ratios(&a, &b), vec![0.8, 0.8, 0.8]);
        assert!(close(median_ratio(&a, &b).unwrap(), 0.8));
    }

    #[test]
    fn a_round_missing_on_either_side_is_skipped_not_shifted() {
        let a = [Some(10.0), None, Some(30.0), Some(8.0)];
        let b = [Some(5.0), Some(7.0), None, Some(4.0)];
        assert_eq!(paired_ratios(&a, &b), vec![2.0, 2.0]);
        assert_eq!(paired_differences(&a, &b), vec![5.0, 4.0]);
        assert_eq!(median_ratio(&[None], &[Some(1.0)]), None);
    }

    #[test]
    fn a_zero_denominator_gives_no_ratio() {
        assert_eq!(paired_ratios(&[Some(1.0)], &[Some(0.0)]), Vec::<f64>::new());
    }

    #[test]
    fn median_difference_pairs_rounds() {
        // p99 added by the proxy: (12-2, 15-3, 11-2) = (10, 12, 9) → median 10.
        let proxy = [Some(12.0), Some(15.0), Some(11.0)];
        let direct = [Some(2.0), Some(3.0), Some(2.0)];
        assert_eq!(median_difference(&proxy, &direct), Some(10.0));
    }

    #[test]
    fn spread_is_range_over_median() {
        assert_eq!(
            relative_spread(&[Some(90.0), Some(100.0), Some(110.0)]),
            Some(0.2)
        );
        assert_eq!(relative_spread(&[Some(1.0)]), None);
    }

    #[test]
    fn cpu_per_10k_scales_by_requests() {
        assert_eq!(cpu_per_10k(2.0, 20_000), Some(1.0));
        assert_eq!(cpu_per_10k(2.0, 0), None);
    }

    #[test]
    fn the_kernel_ceiling_counts_the_shared_upstream() {
        // nginx: 14 µs a request of which 12 in the kernel; upstream 9 µs on the same CPU.
        let c = kernel_ceiling(14.0, 12.0, 9.0).unwrap();
        assert!(close(c, 23.0 / 21.0));
        // Without an upstream on the CPU the ceiling is the reference's own CPU over its kernel.
        assert!(close(kernel_ceiling(14.0, 12.0, 0.0).unwrap(), 14.0 / 12.0));
        assert_eq!(kernel_ceiling(0.0, 0.0, 0.0), None);
        assert_eq!(kernel_ceiling(1.0, 2.0, 0.0), None);
    }
}
