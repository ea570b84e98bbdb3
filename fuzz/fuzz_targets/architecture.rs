//! Architecture JSON (`{"input_shape": [h, w, c], "layers": [..]}`) through
//! `Sequential::from_architecture` and the summary.
#![no_main]

use convoy::model::Sequential;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(arch) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    if let Ok(model) = Sequential::from_architecture(&arch) {
        let _ = model.summary();
    }
});
