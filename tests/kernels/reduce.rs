//! Column sums and vector sums against f64 sums.

use convoy::kernels::reduce;

use crate::common::*;

/// f64 column sums of `x` seen as `[rows, cols]`.
pub(crate) fn column_sums(x: &[f32], cols: usize) -> Vec<f64> {
    let mut s = vec![0.0f64; cols];
    for (i, v) in x.iter().enumerate() {
        s[i % cols] += *v as f64;
    }
    s
}

#[test]
fn sum_of_a_vector() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(21);
        for n in [1, 255, 256, 257, 100_003] {
            // An offset keeps the total away from zero, where a max-norm relative error means little.
            let x: Vec<f32> = random(&mut r, n).iter().map(|v| v + 0.3).collect();
            let (tx, out) = (upload(&x, &[n]), d.zeros(&[1]).unwrap());
            let dispatches = reduce::sum(&d, &tx, &out).unwrap();
            if n == 100_003 {
                assert_eq!(dispatches.len(), 2, "a long vector is split across workgroups and merged");
            }
            run(&dispatches);
            let e = assert_close(&format!("sum n={n}"), &read(&out), &[x.iter().map(|v| *v as f64).sum()]);
            println!("sum n={n}: rel err {e:.2e}");
        }
    });
}

#[test]
fn column_sums_of_matrices() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(22);
        let shapes: &[&[usize]] =
            &[&[1, 1], &[255, 3], &[256, 16], &[257, 64], &[100_003, 1], &[33, 130], &[2, 5, 7, 17], &[1000, 5], &[3, 513]];
        for shape in shapes {
            let cols = *shape.last().unwrap();
            let n: usize = shape.iter().product();
            let x = random(&mut r, n);
            // Stale contents in out must not leak into the result.
            let (tx, out) = (upload(&x, shape), upload(&vec![7.0; cols], &[cols]));
            run(&reduce::sum_rows(&d, &tx, &out).unwrap());
            let e = assert_close(&format!("sum_rows {shape:?}"), &read(&out), &column_sums(&x, cols));
            println!("sum_rows {shape:?}: rel err {e:.2e}");
        }
    });
}

#[test]
fn an_empty_vector_sums_to_zero() {
    on_each_variant(|_| {
        let d = device();
        let (tx, out) = (d.zeros(&[0]).unwrap(), upload(&[5.0], &[1]));
        run(&reduce::sum(&d, &tx, &out).unwrap());
        assert_eq!(read(&out), [0.0]);
    });
}

#[test]
fn bad_shapes_are_refused() {
    let d = device();
    let x = d.zeros(&[4, 3]).unwrap();
    assert!(reduce::sum_rows(&d, &x, &d.zeros(&[4]).unwrap()).is_err(), "out must be [C]");
    assert!(reduce::sum(&d, &x, &d.zeros(&[2]).unwrap()).is_err(), "out must be [1]");
    assert!(reduce::sum_rows(&d, &x, &x.view(0, &[3]).unwrap()).is_err(), "out may not overlap x");
    let e = reduce::sum_rows(&d, &x, &d.zeros(&[4]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("[4, 3]") && e.contains("[4]"), "the message names the shapes: {e}");
}
