//! `convoy devices`: what adapters exist, without opening any.

use convoy::device::{adapters, summarize};
use convoy::Result;

pub fn run(json: bool) -> Result<()> {
    let list = summarize(&adapters());
    if json {
        println!("{}", serde_json::json!({ "devices": list }));
        return Ok(());
    }
    if list.is_empty() {
        println!("no adapters found (install a Vulkan driver; for a software one: mesa-vulkan-drivers)");
    }
    for a in &list {
        println!(
            "{}{} {} [{} {}, {}] bus {} max binding {} MB, workgroup memory {} KB{}{}",
            a.index,
            if a.default { "*" } else { " " },
            a.name,
            a.vendor,
            a.device_type,
            a.backend,
            if a.pci_bus_id.is_empty() { "-" } else { &a.pci_bus_id },
            a.max_storage_buffer_binding_size >> 20,
            a.max_compute_workgroup_storage_size >> 10,
            if a.features.is_empty() { String::new() } else { format!(", {}", a.features.join(" ")) },
            if a.compute_shaders { "" } else { " - no compute shaders: cannot be used" }
        );
    }
    println!("* used by default (`--devices all`)");
    Ok(())
}
