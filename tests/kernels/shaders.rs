//! Every WGSL file parses and validates under naga with all capabilities the adapters offer.

use convoy::kernels::ALL_SHADERS;

#[test]
fn every_wgsl_file_parses_and_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    on_disk.sort();
    let mut registered: Vec<String> = ALL_SHADERS.iter().map(|s| s.file().to_string()).collect();
    registered.sort();
    registered.dedup();
    assert_eq!(on_disk, registered, "every file in shaders/ must be registered in kernels::ALL_SHADERS");
    for shader in ALL_SHADERS {
        let module = naga::front::wgsl::parse_str(shader.source).unwrap_or_else(|e| panic!("{}: {}", shader.name, e.emit_to_string(shader.source)));
        let mut validator = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all());
        validator.validate(&module).unwrap_or_else(|e| panic!("{}: {}", shader.name, e.emit_to_string(shader.source)));
        assert!(!module.entry_points.is_empty(), "{} has no entry point", shader.name);
    }
}
