//! `convoy evaluate` and `convoy predict`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use convoy::data::{from_spec, Dataset};
use convoy::model::{DTypePolicy, Sequential, UnlabelledFolder};
use convoy::{bail, Result};

use super::JsonNumbers;

#[derive(Args, Debug)]
pub struct EvaluateArgs {
    #[arg(long)]
    pub load: PathBuf,
    /// The validation split of this data is evaluated.
    #[arg(long, default_value = "synthetic")]
    pub data: String,
    /// Defaults to the model's input size.
    #[arg(long)]
    pub image_size: Option<usize>,
    #[arg(long, default_value = "all")]
    pub devices: String,
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    /// float32, or mixed (f16 products; the file's f32 weights load into either).
    #[arg(long, default_value = "float32")]
    pub precision: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PredictArgs {
    #[arg(long)]
    pub load: PathBuf,
    /// images:DIR predicts every .jpg and .png directly in DIR, a line per file; for any
    /// other spec its validation split is predicted, a line per index.
    #[arg(long)]
    pub data: String,
    #[arg(long)]
    pub image_size: Option<usize>,
    #[arg(long, default_value = "all")]
    pub devices: String,
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    /// With --json: every class's probability in each line ("scores"), not only the best.
    #[arg(long)]
    pub scores: bool,
    #[arg(long)]
    pub json: bool,
}

/// Opens the model first (so a bad file fails before any data is read), then the data at
/// the model's input size unless told otherwise. Loading warns, naming the tensors, when
/// the file's weights or moving statistics hold NaN or infinity: the results will be NaN.
/// With `images:DIR` the data is that folder's unlabelled images, with their files.
fn open(load: &std::path::Path, data: &str, image_size: Option<usize>, devices: &str, batch: usize, precision: DTypePolicy) -> Result<(Sequential, Arc<dyn Dataset>, Option<Vec<PathBuf>>)> {
    let devices = convoy::device::open(devices)?;
    let model = Sequential::load_compiled_with(load, devices, batch, precision)?;
    let size = image_size.unwrap_or(model.input_shape()[0]);
    if let Some(dir) = data.strip_prefix(IMAGES) {
        if dir.is_empty() {
            bail!(Config, "data spec '{data}' needs a directory: {IMAGES}DIR");
        }
        let folder = UnlabelledFolder::open(dir, size)?;
        let files = (0..folder.len()).map(|i| folder.file(i)).collect();
        return Ok((model, Arc::new(folder), Some(files)));
    }
    let (_, val) = from_spec(data, Some(size), 0)?;
    Ok((model, val, None))
}

/// The `--data` form of a flat folder of unlabelled images (`predict` only).
const IMAGES: &str = "images:";

pub fn run_evaluate(a: EvaluateArgs) -> Result<()> {
    if a.data.starts_with(IMAGES) {
        bail!(Config, "evaluate needs labelled data; '{}' has no labels (convoy predict reads it)", a.data);
    }
    let (mut model, val, _) = open(&a.load, &a.data, a.image_size, &a.devices, a.batch_size, DTypePolicy::from_name(&a.precision)?)?;
    let logs = model.evaluate(val, a.batch_size)?;
    let get = |k: &str| logs.get(k).copied().unwrap_or(f64::NAN);
    if a.json {
        let mut n = JsonNumbers::default();
        let out = json!({ "loss": n.num("loss", get("loss")), "accuracy": n.num("accuracy", get("accuracy")), "samples": get("samples") as u64 });
        println!("{}", n.finish(out));
    } else {
        println!("loss {:.4}  accuracy {:.4}  on {} samples", get("loss"), get("accuracy"), get("samples"));
    }
    Ok(())
}

/// Prints a line per sample: its file (`images:DIR`) or index, the class and its probability.
pub fn run_predict(a: PredictArgs) -> Result<()> {
    let (mut model, val, files) = open(&a.load, &a.data, a.image_size, &a.devices, a.batch_size, DTypePolicy::Float32)?;
    // The model's own names (saved from its training data), else the data's.
    let names = if model.class_names().is_empty() { val.class_names() } else { model.class_names().to_vec() };
    let probs = model.predict(val, a.batch_size)?;
    // A row with a NaN probability (NaN weights) predicts no class: NaN compares false, so
    // the arg-max alone would name class 0.
    let rows: Vec<Option<(usize, f32)>> = probs
        .iter()
        .map(|p| {
            if p.iter().any(|v| v.is_nan()) {
                return None;
            }
            Some(p.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }))
        })
        .collect();
    let label = |c: usize| names.get(c).cloned().unwrap_or_else(|| c.to_string());
    let name = |i: usize| files.as_ref().map_or_else(|| i.to_string(), |f| f[i].display().to_string());
    if a.json {
        let preds: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut row = match r {
                    Some((c, p)) => json!({ "class": c, "label": label(*c), "probability": p }),
                    None => json!({ "class": null, "label": null, "probability": null }),
                };
                if a.scores {
                    row["scores"] = json!(probs[i].iter().map(|&v| if v.is_finite() { json!(v) } else { serde_json::Value::Null }).collect::<Vec<_>>());
                }
                match &files {
                    Some(f) => row["file"] = json!(f[i].display().to_string()),
                    None => row["index"] = json!(i),
                }
                row
            })
            .collect();
        println!("{}", json!({ "samples": rows.len(), "predictions": preds }));
    } else {
        for (i, r) in rows.iter().enumerate() {
            match r {
                Some((c, p)) => println!("{}\t{}\t{p:.4}", name(i), label(*c)),
                None => println!("{}\t-\tNaN", name(i)),
            }
        }
    }
    Ok(())
}
