//! A packed file's bytes (`convoy pack`'s format) read as `--data packed:FILE` reads it; every
//! sample of both splits is then loaded as validation and as training would (centre crop, and
//! a random-resized crop), so that any index the checks let through is also sliced.
#![no_main]

use std::path::Path;

use convoy::data::{Dataset, Packed, RandomResizedCrop, packed_from_bytes};
use libfuzzer_sys::fuzz_target;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn each_sample(ds: &Packed) {
    let mut buf = vec![0u8; ds.sample_bytes()];
    let mut rng = StdRng::seed_from_u64(0);
    for i in 0..ds.len() {
        ds.load(i, &mut buf).expect("a sample of a checked file loads");
        ds.load_random_crop(i, &mut buf, &RandomResizedCrop::default(), &mut rng).expect("a crop of a checked file loads");
    }
}

fuzz_target!(|data: &[u8]| {
    // A small training size keeps each resampling cheap whatever the stored sizes.
    if let Ok((train, val)) = packed_from_bytes(data.to_vec(), Path::new("fuzz.pack"), Some(4)) {
        each_sample(&train);
        each_sample(&val);
    }
});
