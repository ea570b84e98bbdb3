//! `convoy pack`.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde_json::json;

use convoy::data::pack_folder;
use convoy::{bail, Result};

use super::check_output;

#[derive(Args, Debug)]
pub struct PackArgs {
    /// folder:DIR, with DIR/train/<class>/* and DIR/val/<class>/* (JPEG or PNG).
    #[arg(long)]
    pub data: String,
    /// The short side every image is resized to and stored at; train from the file at this
    /// size or below (at 224 px, pack at 256: validation resizes to 256 before its 224 crop).
    #[arg(long)]
    pub image_size: usize,
    /// The packed file to write (atomically); train from it with --data packed:FILE.
    #[arg(long)]
    pub out: PathBuf,
    /// End standard output with one JSON object: out, train, val, classes, image_size, bytes, seconds.
    #[arg(long)]
    pub json: bool,
}

/// Decodes the folder once into a packed file.
pub fn run(a: PackArgs) -> Result<()> {
    let started = Instant::now();
    let Some(("folder", dir)) = a.data.split_once(':').filter(|(_, d)| !d.is_empty()) else {
        bail!(Config, "convoy pack reads an image folder, --data folder:DIR; got '{}'", a.data);
    };
    check_output(&Some(a.out.clone()))?;
    let report = pack_folder(dir, a.image_size, &a.out)?;
    let seconds = started.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            json!({ "out": a.out, "train": report.train, "val": report.val, "classes": report.classes,
                    "image_size": a.image_size, "bytes": report.bytes, "seconds": seconds })
        );
    } else {
        println!(
            "packed {} training and {} validation images of {} classes at a short side of {} px into {} ({:.1} MB, {:.1} s)",
            report.train,
            report.val,
            report.classes,
            a.image_size,
            a.out.display(),
            report.bytes as f64 / 1e6,
            seconds
        );
    }
    Ok(())
}
