//! Concatenation along the last axis and its gradient against plain-Rust copies, on every
//! shader variant, with a coverage assertion over the wrappers' paths.

use convoy::kernels::concat;

use crate::common::*;

#[test]
fn concat_slice_and_pad_blocks_copy_exactly() {
    take_paths();
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(11);
        // (rows, widths): one column, odd widths, and a part as wide as a workgroup or more.
        for (rows, widths) in [(1, vec![1, 1]), (7, vec![3, 5, 1]), (250, vec![16, 3]), (33, vec![257, 256, 2]), (1025, vec![4, 12, 7])] {
            let total: usize = widths.iter().sum();
            let parts: Vec<Vec<f32>> = widths.iter().map(|&w| random(&mut r, rows * w)).collect();
            let tparts: Vec<_> = parts.iter().zip(&widths).map(|(p, &w)| upload(p, &[rows, w])).collect();
            let whole = d.zeros(&[rows, total]).unwrap();
            let back: Vec<_> = widths.iter().map(|&w| d.zeros(&[rows, w]).unwrap()).collect();
            let mut ds = Vec::new();
            let mut offset = 0;
            for (k, w) in widths.iter().enumerate() {
                ds.push(concat::concat_block(&d, &tparts[k], &whole, offset).unwrap());
                offset += w;
            }
            offset = 0;
            for (k, w) in widths.iter().enumerate() {
                ds.push(concat::slice_block(&d, &whole, &back[k], offset).unwrap());
                offset += w;
            }
            run(&ds);
            let mut want = Vec::with_capacity(rows * total);
            for row in 0..rows {
                for (p, &w) in parts.iter().zip(&widths) {
                    want.extend(p[row * w..(row + 1) * w].iter().map(|&v| v as f64));
                }
            }
            assert_close(&format!("concat rows={rows} widths={widths:?}"), &read(&whole), &want);
            for (k, p) in parts.iter().enumerate() {
                let want: Vec<f64> = p.iter().map(|&v| v as f64).collect();
                assert_close(&format!("slice {k} rows={rows} widths={widths:?}"), &read(&back[k]), &want);
            }
        }
    });
    // A block padded with zeros over a stale (NaN) whole: the block copied, every other
    // column zero.
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(12);
        for (rows, width, total, offset) in [(1, 1, 2, 0), (49, 192, 256, 0), (250, 3, 8, 2), (1025, 5, 5, 0)] {
            let part = random(&mut r, rows * width);
            let whole = upload(&vec![f32::NAN; rows * total], &[rows, total]);
            run(&[concat::pad_block(&d, &upload(&part, &[rows, width]), &whole, offset).unwrap()]);
            let want: Vec<f64> = (0..rows * total).map(|i| {
                let (row, col) = (i / total, i % total);
                if (offset..offset + width).contains(&col) { part[row * width + col - offset] as f64 } else { 0.0 }
            }).collect();
            let got = read(&whole);
            assert!(got.iter().zip(&want).all(|(g, w)| *g as f64 == *w), "pad rows={rows} width={width} total={total} offset={offset}: not an exact copy with zeros");
        }
    });
    let taken = take_paths();
    let want: Vec<(&str, String)> = ["concat_block", "slice_block", "pad_block"].iter().map(|e| (*e, "grid=1d".to_string())).collect();
    assert_paths_cover("concat", &taken, &want, &[]);
}

#[test]
fn blocks_that_do_not_fit_are_refused_naming_the_shapes() {
    let d = device();
    let (part, whole) = (d.zeros(&[4, 3]).unwrap(), d.zeros(&[4, 5]).unwrap());
    let err = concat::concat_block(&d, &part, &whole, 3).err().unwrap().to_string();
    assert!(err.contains("[4, 3]") && err.contains("[4, 5]") && err.contains("column 3"), "{err}");
    let other = d.zeros(&[5, 5]).unwrap();
    assert!(concat::slice_block(&d, &other, &part, 0).is_err());
}
