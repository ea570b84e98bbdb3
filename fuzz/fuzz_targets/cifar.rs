//! One CIFAR binary file's bytes, read as CIFAR-10 and as CIFAR-100; every sample of a
//! decoded set is then loaded as a data loader would.
#![no_main]

use std::path::Path;

use convoy::data::{Dataset, InMemory, cifar10_from_bytes, cifar100_from_bytes};
use libfuzzer_sys::fuzz_target;

fn each_sample(ds: &InMemory) {
    let mut buf = vec![0u8; ds.sample_bytes()];
    for i in 0..ds.len() {
        ds.load(i, &mut buf).expect("a decoded sample loads");
    }
}

fuzz_target!(|data: &[u8]| {
    let source = Path::new("fuzz.bin");
    if let Ok(ds) = cifar10_from_bytes(data, source) {
        each_sample(&ds);
    }
    if let Ok(ds) = cifar100_from_bytes(data, source) {
        each_sample(&ds);
    }
});
