//! Splitting a global batch across replicas in proportion to their measured speed.

/// Samples per replica for a batch of `n`: proportional to `speed` (largest remainder
/// first), every replica getting at least one sample while `n` allows, so no replica runs
/// an empty step and a short final batch still gives each a valid share.
pub fn split(n: usize, speed: &[f64]) -> Vec<usize> {
    let r = speed.len();
    if r == 0 {
        return Vec::new();
    }
    if n <= r {
        return (0..r).map(|i| usize::from(i < n)).collect();
    }
    // Whole groups of 8 samples where the batch allows: GPU kernels tile by 4 and 8, and
    // fewer distinct shares mean fewer compiled steps. The remainder goes to the first.
    const GROUP: usize = 8;
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

#[cfg(test)]
mod tests {
    use super::split;

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
}
