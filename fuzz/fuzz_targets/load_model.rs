//! A model file's bytes through `Sequential::load_bytes`, then the summary (which walks every
//! layer's shapes, parameters and FLOPs): any panic, abort, hang or allocation past the RSS
//! limit is a bug; an `Err` is the expected answer to a bad file.
#![no_main]

use std::path::Path;

use convoy::model::Sequential;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((model, _)) = Sequential::load_bytes(data, Path::new("fuzz.safetensors")) {
        let _ = model.summary();
    }
});
