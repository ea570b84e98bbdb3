//! Splitting a global batch across replicas in proportion to their speed, and choosing
//! which replicas take part at all.

/// Whole groups of this many samples where the batch allows: GPU kernels tile by 4 and 8,
/// and fewer distinct shares mean fewer compiled steps.
const GROUP: usize = 8;

/// Samples per replica for a batch of `n`: proportional to `speed` (largest remainder
/// first). A replica of speed 0 is set aside and gets nothing; every other one gets at
/// least one sample while `n` allows, so no active replica runs an empty step and a short
/// final batch still gives each a valid share.
pub fn split(n: usize, speed: &[f64]) -> Vec<usize> {
    let active: Vec<usize> = (0..speed.len()).filter(|&i| speed[i] > 0.0).collect();
    let mut out = vec![0; speed.len()];
    if active.is_empty() {
        return out;
    }
    let s: Vec<f64> = active.iter().map(|&i| speed[i]).collect();
    for (&i, c) in active.iter().zip(split_active(n, &s)) {
        out[i] = c;
    }
    out
}

fn split_active(n: usize, speed: &[f64]) -> Vec<usize> {
    let r = speed.len();
    if n <= r {
        return (0..r).map(|i| usize::from(i < n)).collect();
    }
    // The remainder of the groups goes to the first.
    if n >= 2 * GROUP * r {
        let mut counts: Vec<usize> = proportional(n / GROUP, speed).iter().map(|c| c * GROUP).collect();
        counts[0] += n % GROUP;
        return counts;
    }
    proportional(n, speed)
}

/// One sample each, the rest in proportion to `speed` by largest remainder (n > len).
fn proportional(n: usize, speed: &[f64]) -> Vec<usize> {
    let r = speed.len();
    let total: f64 = speed.iter().map(|s| s.max(1e-9)).sum();
    // One sample each first, then the rest by speed.
    let rest = n - r;
    let ideal: Vec<f64> = speed.iter().map(|s| rest as f64 * s.max(1e-9) / total).collect();
    let mut counts: Vec<usize> = ideal.iter().map(|x| x.floor() as usize).collect();
    let mut left = rest - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..r).collect();
    order.sort_by(|&a, &b| (ideal[b] - ideal[b].floor()).total_cmp(&(ideal[a] - ideal[a].floor())).then(a.cmp(&b)));
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts.iter().map(|c| c + 1).collect()
}

/// Speeds with every replica slower than 1/64 of the fastest set to 0 (aside). Given its
/// exact proportional share, such a replica would do under 1.6% of the batch, one sample
/// of a batch of 64 or a group of 8 of 512, while the step still waits for its readback,
/// the host exchange and its update: it cannot make the step faster. This is the rule for
/// speeds known only as ratios (fixed by the user, or measured while training); with
/// measured costs, [`choose`] decides.
pub fn drop_negligible(speed: &[f64]) -> Vec<f64> {
    let max = speed.iter().copied().fold(0.0, f64::max);
    speed.iter().map(|&s| if s * 64.0 < max { 0.0 } else { s }).collect()
}

/// A replica's measured step time on `n` samples: `fixed + n * per_sample` seconds (the
/// fixed part is dispatch, staging and submission, which a share of one sample still pays).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepCost {
    /// Seconds every step pays whatever its size.
    pub fixed: f64,
    /// Seconds per sample.
    pub per_sample: f64,
}

impl StepCost {
    /// From the times of two step sizes (`small` < `large` samples); a noisy pair that
    /// would give a negative slope or fixed part is clamped.
    pub fn fit(small: (usize, f64), large: (usize, f64)) -> StepCost {
        let (n0, t0) = (small.0 as f64, small.1);
        let (n1, t1) = (large.0 as f64, large.1);
        if n1 <= n0 {
            return StepCost { fixed: 0.0, per_sample: t1 / n1.max(1.0) };
        }
        let per_sample = ((t1 - t0) / (n1 - n0)).max(t1 / n1 * 0.05).max(1e-12);
        let fixed = (t1 - per_sample * n1).max(0.0);
        StepCost { fixed, per_sample }
    }
    /// The predicted seconds of a step on `n` samples (0 for none).
    pub fn time(&self, n: usize) -> f64 {
        if n == 0 { 0.0 } else { self.fixed + n as f64 * self.per_sample }
    }
}

/// Which replicas a batch of `batch` should run on, as speeds for [`split`] (0: set aside).
///
/// For every set of the k fastest replicas (by their time for the whole batch) the shares
/// that make them finish together are worked out from their costs, rounded as `split`
/// rounds them, and the step's time is the slowest share's plus, with two or more replicas,
/// `exchange(k, compute)`: what the host all-reduce, readback, upload and update of k
/// replicas add to a step whose slowest share computes for `compute` seconds (the exchange
/// runs bucket by bucket beside the backward, so it depends on both). A larger
/// set is taken only if it is predicted faster by more than `margin` (a fraction, e.g. 0.05),
/// so a device whose inclusion cannot make the step faster, counting its fixed cost and the
/// exchange, gets no samples. The fastest replica is always in.
pub fn choose(batch: usize, cost: &[StepCost], exchange: impl Fn(usize, f64) -> f64, margin: f64) -> Vec<f64> {
    let r = cost.len();
    let mut order: Vec<usize> = (0..r).collect();
    order.sort_by(|&a, &b| cost[a].time(batch).total_cmp(&cost[b].time(batch)).then(a.cmp(&b)));
    let mut best: Option<(f64, Vec<f64>)> = None;
    for k in 1..=r {
        let p = predict(batch, cost, &order[..k], &exchange);
        let step = p.compute + p.exchange;
        match &best {
            Some((b, _)) if step >= b * (1.0 - margin) => {}
            _ => best = Some((step, p.speed)),
        }
    }
    best.map(|(_, s)| s).unwrap_or_default()
}

/// A step of `batch` samples on the replicas of `set`, as [`choose`] predicts it.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// Speeds for [`split`] that make the set finish together (0 outside it).
    pub speed: Vec<f64>,
    /// Seconds until the slowest share has computed.
    pub compute: f64,
    /// Seconds the exchange adds (none for one replica).
    pub exchange: f64,
}

/// Shares of `batch` for the replicas of `set` such that they finish together, rounded as
/// [`split`] rounds them, and the step's compute and exchange time.
pub fn predict(batch: usize, cost: &[StepCost], set: &[usize], exchange: impl Fn(usize, f64) -> f64) -> Prediction {
    // Equal finish time T: sum over the set of (T - fixed) / per_sample = batch.
    let inv: f64 = set.iter().map(|&i| 1.0 / cost[i].per_sample).sum();
    let lead: f64 = set.iter().map(|&i| cost[i].fixed / cost[i].per_sample).sum();
    let t = (batch as f64 + lead) / inv;
    let mut speed = vec![0.0; cost.len()];
    for &i in set {
        speed[i] = ((t - cost[i].fixed) / cost[i].per_sample).max(1e-6);
    }
    let shares = split(batch, &speed);
    let compute = set.iter().map(|&i| cost[i].time(shares[i])).fold(0.0, f64::max);
    let exchange = if set.len() > 1 { exchange(set.len(), compute) } else { 0.0 };
    Prediction { speed, compute, exchange }
}

#[cfg(test)]
mod tests {
    use super::{choose, drop_negligible, split, StepCost};

    #[test]
    fn splits_cover_the_batch_and_follow_speed() {
        assert_eq!(split(256, &[1.0, 1.0]), vec![128, 128]);
        assert_eq!(split(257, &[1.0, 1.0]), vec![129, 128]);
        assert_eq!(split(300, &[2.0, 1.0]), vec![196, 104]);
        assert_eq!(split(512, &[1.0, 1.02]), vec![256, 256]);
        assert_eq!(split(3, &[1.0, 1.0, 1.0, 1.0]), vec![1, 1, 1, 0]);
        assert_eq!(split(5, &[100.0, 1.0]), vec![4, 1]);
        for n in [1usize, 2, 7, 64, 1001] {
            for speed in [vec![1.0], vec![1.0, 3.0], vec![0.5, 1.0, 2.0, 0.1]] {
                let s = split(n, &speed);
                assert_eq!(s.iter().sum::<usize>(), n, "{n} {speed:?}");
                if n >= speed.len() {
                    assert!(s.iter().all(|&c| c >= 1), "{n} {speed:?} -> {s:?}");
                }
            }
        }
    }

    #[test]
    fn a_replica_of_speed_zero_gets_nothing() {
        for n in [1usize, 2, 3, 16, 128, 1001] {
            assert_eq!(split(n, &[1.0, 0.0]), vec![n, 0]);
            assert_eq!(split(n, &[0.0, 1.0]), vec![0, n]);
            let s = split(n, &[2.0, 0.0, 1.0]);
            assert_eq!((s.iter().sum::<usize>(), s[1]), (n, 0), "{n}: {s:?}");
            assert!(n < 2 || s[2] >= 1, "{n}: {s:?}");
        }
        assert_eq!(split(128, &[0.0, 0.0]), vec![0, 0]);
        // Ratios alone: from 1:64 on, the slow replica is left out.
        for (ratio, kept) in [(1.0, true), (3.0, true), (20.0, true), (63.0, true), (65.0, false), (700.0, false), (1000.0, false)] {
            let s = drop_negligible(&[1.0, 1.0 / ratio]);
            assert_eq!(s[1] > 0.0, kept, "1:{ratio}");
            assert_eq!(s[0], 1.0);
            assert_eq!(split(128, &s)[1] > 0, kept, "1:{ratio}");
        }
        assert_eq!(drop_negligible(&[0.001, 1.0, 0.5]), vec![0.0, 1.0, 0.5]);
    }

    /// A fast replica of 1 ms fixed and 0.1 ms a sample, and one `ratio` times slower in
    /// both; the exchange of two replicas costs 2 ms.
    fn pair(ratio: f64) -> Vec<StepCost> {
        vec![StepCost { fixed: 1e-3, per_sample: 1e-4 }, StepCost { fixed: 1e-3 * ratio, per_sample: 1e-4 * ratio }]
    }

    #[test]
    fn the_split_follows_ratios_from_1_to_1000_and_leaves_out_a_device_that_cannot_help() {
        let exchange = |k: usize, _: f64| if k > 1 { 2e-3 } else { 0.0 };
        let mut last_share = usize::MAX;
        for ratio in [1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 300.0, 700.0, 1000.0] {
            let cost = pair(ratio);
            let speed = choose(128, &cost, exchange, 0.05);
            let shares = split(128, &speed);
            assert_eq!(shares.iter().sum::<usize>(), 128);
            // The slow share shrinks as the ratio grows.
            assert!(shares[1] <= last_share, "{ratio}: {shares:?}");
            last_share = shares[1];
            // Never predicted slower than the fast device alone.
            let alone = cost[0].time(128);
            let mixed = cost.iter().zip(&shares).map(|(c, &n)| c.time(n)).fold(0.0, f64::max) + if shares[1] > 0 { exchange(2, 0.0) } else { 0.0 };
            assert!(mixed <= alone * 1.0001, "{ratio}: {shares:?} takes {mixed} against {alone} alone");
            if ratio == 1.0 {
                assert_eq!(shares, vec![64, 64]);
            }
            if ratio >= 20.0 {
                assert_eq!(shares, vec![128, 0], "{ratio}");
            }
        }
        // The order of the replicas does not matter: the slow one first.
        let mut cost = pair(700.0);
        cost.reverse();
        assert_eq!(split(128, &choose(128, &cost, exchange, 0.05)), vec![0, 128]);
        // Equal devices whose exchange costs more than half a step stay alone.
        assert_eq!(split(128, &choose(128, &pair(1.0), |_, _| 20e-3, 0.05)), vec![128, 0]);
        // Fixed cost counted: a device as fast per sample but with 12 ms of fixed cost a step
        // cannot help a 13.8 ms step (its share plus the 2 ms exchange come to 14.9 ms).
        let cost = vec![StepCost { fixed: 1e-3, per_sample: 1e-4 }, StepCost { fixed: 12e-3, per_sample: 1e-4 }];
        assert_eq!(split(128, &choose(128, &cost, exchange, 0.05)), vec![128, 0]);
    }

    /// An exchange that runs beside the backward adds only what does not fit there: two equal
    /// devices whose 6 ms serial exchange would eat the whole gain share the batch once 4.5 ms
    /// of it hide behind the backward (2/3 of the 7.4 ms half step).
    #[test]
    fn an_exchange_hidden_by_the_backward_keeps_an_equal_device() {
        let serial = |k: usize, _: f64| if k > 1 { 6.3e-3 } else { 0.0 };
        assert_eq!(split(128, &choose(128, &pair(1.0), serial, 0.05)), vec![128, 0]);
        let beside = |k: usize, compute: f64| if k > 1 { 0.3e-3 + 1.5e-3 + (4.5e-3 - compute * 2.0 / 3.0).max(0.0) } else { 0.0 };
        assert_eq!(split(128, &choose(128, &pair(1.0), beside, 0.05)), vec![64, 64]);
    }

    #[test]
    fn costs_fit_two_step_sizes() {
        let c = StepCost::fit((16, 1e-3 + 16e-4), (128, 1e-3 + 128e-4));
        assert!((c.fixed - 1e-3).abs() < 1e-9 && (c.per_sample - 1e-4).abs() < 1e-12, "{c:?}");
        // Noise making the small step slower than the large one still gives a positive slope.
        let c = StepCost::fit((16, 2e-3), (128, 1e-3));
        assert!(c.per_sample > 0.0 && c.fixed >= 0.0, "{c:?}");
    }
}
