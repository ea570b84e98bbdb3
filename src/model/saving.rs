//! Saving and loading in safetensors: every parameter as a named tensor (`conv2d/kernel`),
//! the moving statistics and the optimizer state beside them, and the architecture,
//! optimizer, normalisation, class names and training position in the metadata.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};

use crate::limits::{self, MAX_MODEL_FILE_BYTES, MAX_SIDE, MAX_UNITS};
use crate::model::config::layer_from_config;
use crate::model::losses::{Loss, Metric};
use crate::model::sequential::CompileOptions;
use crate::model::{DTypePolicy, Sequential};
use crate::optim::Optimizer;
use crate::{Device, Error, Result};

const FORMAT: &str = "convoy-1";

/// What a checkpoint says about training, besides the weights.
#[derive(Clone, Debug)]
pub struct TrainingState {
    /// The update rule and its settings.
    pub optimizer: Optimizer,
    /// The loss the model was compiled with.
    pub loss: Loss,
    /// The metrics the model was compiled with.
    pub metrics: Vec<Metric>,
    /// Optimizer steps taken (Adam's bias correction resumes from it).
    pub step: u64,
    /// Epochs trained: a resumed `fit` continues from it.
    pub epoch: usize,
    /// The learning rate at the time of saving (the one callbacks last set).
    pub learning_rate: f32,
    /// The cross-entropy's label smoothing (absent, as 0, in files saved before it existed).
    pub label_smoothing: f32,
}

impl Sequential {
    /// Writes the model to `path` atomically: a temporary file in the same directory,
    /// renamed over `path` once complete, so a crash never leaves a half-written file.
    /// `path` is anything path-like (`"model.safetensors"`, a `PathBuf`), as in Keras.
    /// Under `mpirun` only rank 0 writes (every rank holds the same model; the others' files
    /// would race for one path on a shared disk), so checkpoints are written once too.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        if crate::distributed::world().is_some_and(|w| w.rank() > 0) {
            return Ok(());
        }
        let path = path.as_ref();
        let (params, states, opt) = self.get_weights()?;
        // A model loaded or imported and not compiled yet holds its weights in the layout of
        // its layers, which only `compile` stores in the definition.
        let built;
        let layout = match self.compiled {
            Some(_) => &self.def.layout,
            None => {
                built = self.def.build_layout()?;
                &built
            }
        };
        let mut tensors: Vec<(String, Vec<usize>, &[f32])> = Vec::new();
        for e in &layout.params {
            tensors.push((e.name.clone(), e.spec.shape.clone(), &params[e.range()]));
        }
        for e in &layout.states {
            tensors.push((e.name.clone(), e.spec.shape.clone(), &states[e.range()]));
        }
        for (i, s) in opt.iter().enumerate() {
            tensors.push((format!("optimizer/{i}"), vec![s.len()], s));
        }
        let views: Vec<(String, TensorView)> = tensors
            .iter()
            .map(|(name, shape, data)| {
                let view = TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(data)).map_err(|e| Error::Config(format!("tensor {name}: {e}")))?;
                Ok((name.clone(), view))
            })
            .collect::<Result<_>>()?;
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("architecture".to_string(), self.architecture().to_string());
        meta.insert("normalization".to_string(), json!({ "mean": self.def.mean, "std": self.def.std }).to_string());
        if !self.class_names.is_empty() {
            meta.insert("class_names".to_string(), json!(self.class_names).to_string());
        }
        if let Some(c) = &self.compiled {
            let training = json!({
                "optimizer": c.optimizer,
                "loss": self.def.loss,
                "metrics": c.metrics,
                "step": c.step,
                "epoch": c.epoch,
                "learning_rate": c.learning_rate,
                "label_smoothing": self.def.label_smoothing,
            });
            meta.insert("training".to_string(), training.to_string());
        }
        let bytes = safetensors::tensor::serialize(views, Some(meta)).map_err(|e| Error::Config(format!("serialising {}: {e}", path.display())))?;
        write_atomic(path, &bytes)
    }

    /// The architecture as Keras-like JSON: input shape and each layer's class and config,
    /// and for a functional model each layer's `inbound` nodes (0 the input, `j` the output of
    /// layer `j - 1`; see [`crate::model::layout::inbound_of`]). A frozen layer's config holds
    /// `"trainable": false`, as Keras writes it; a trainable one's leaves the key out.
    pub fn architecture(&self) -> Value {
        let layers: Vec<Value> = self
            .def
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut config = l.config();
                if self.def.frozen.contains(&i)
                    && let Some(c) = config.as_object_mut()
                {
                    c.insert("trainable".into(), false.into());
                }
                // A layer added to a functional model after it was built reads the one before:
                // written out, so that every layer of a graph's file names what it reads.
                match self.def.inbound.is_empty() {
                    false => json!({ "class_name": l.class_name(), "config": config, "inbound": crate::model::layout::inbound_of(&self.def.inbound, i) }),
                    true => json!({ "class_name": l.class_name(), "config": config }),
                }
            })
            .collect();
        json!({ "input_shape": self.def.input_shape, "layers": layers })
    }

    /// Reads a saved model: architecture, weights, normalisation and (when present) the
    /// training state. The model still needs `compile` (or use [`Sequential::load_compiled`]).
    pub fn load(path: impl AsRef<Path>) -> Result<(Sequential, Option<TrainingState>)> {
        let path = path.as_ref();
        let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
        if len > MAX_MODEL_FILE_BYTES {
            return Err(Error::format(path, format!("file size {len} bytes is above the cap of {MAX_MODEL_FILE_BYTES} for a model")));
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let (model, training) = Sequential::load_bytes(&bytes, path)?;
        // A file of NaN weights loads (it is what a diverged run saved), but every result
        // from it will be NaN: say so once, naming the tensors.
        model.warn_non_finite(path)?;
        Ok((model, training))
    }

    /// [`Sequential::load`] of a file's content already in memory; `path` only names it in
    /// errors. Every size the file declares is checked against [`crate::limits`] before
    /// anything is allocated from it, and every tensor is found and its shape checked before
    /// the flat weights are allocated, so their size is bounded by the file's.
    pub fn load_bytes(bytes: &[u8], path: &Path) -> Result<(Sequential, Option<TrainingState>)> {
        let bad = |msg: String| Error::format(path, msg);
        let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let meta = header.metadata().clone().unwrap_or_default();
        if meta.get("format").map(String::as_str) != Some(FORMAT) {
            return Err(bad(format!("not a convoy model (format {:?}, expected {FORMAT})", meta.get("format"))));
        }
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| bad(format!("corrupt tensors ({e})")))?;
        let arch: Value = serde_json::from_str(meta.get("architecture").ok_or_else(|| bad("no architecture".into()))?)
            .map_err(|e| bad(format!("architecture: {e}")))?;
        let mut model = Sequential::from_architecture(&arch).map_err(|e| bad(e.to_string()))?;
        let layout = model.def.build_layout().map_err(|e| bad(e.to_string()))?;
        let find = |name: &str, shape: &[usize]| -> Result<TensorView<'_>> {
            let t = st.tensor(name).map_err(|_| bad(format!("missing tensor {name}")))?;
            if t.dtype() != Dtype::F32 || t.shape() != shape {
                return Err(bad(format!("tensor {name} is {:?} {:?}, expected F32 {shape:?}", t.dtype(), t.shape())));
            }
            Ok(t)
        };
        let read = |t: &TensorView, out: &mut [f32]| {
            for (o, c) in out.iter_mut().zip(t.data().chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        };
        // A file written before sub-layers were named holds a block's tensors by position.
        let find_entry = |e: &crate::model::layout::Entry| if st.tensor(&e.name).is_err() && st.tensor(&e.legacy_name).is_ok() { find(&e.legacy_name, &e.spec.shape) } else { find(&e.name, &e.spec.shape) };
        let params_found: Vec<TensorView> = layout.params.iter().map(find_entry).collect::<Result<_>>()?;
        let states_found: Vec<TensorView> = layout.states.iter().map(find_entry).collect::<Result<_>>()?;
        let mut params = limits::zeroed(&format!("{} parameters", layout.param_len), layout.param_len).map_err(|e| bad(e.to_string()))?;
        for (e, t) in layout.params.iter().zip(&params_found) {
            read(t, &mut params[e.range()]);
        }
        let mut states = limits::zeroed(&format!("{} moving statistics", layout.state_len), layout.state_len).map_err(|e| bad(e.to_string()))?;
        for (e, t) in layout.states.iter().zip(&states_found) {
            read(t, &mut states[e.range()]);
        }
        let mut opt = Vec::new();
        while let Ok(t) = st.tensor(&format!("optimizer/{}", opt.len())) {
            let t = find(&format!("optimizer/{}", opt.len()), &[layout.param_len]).map_err(|_| {
                bad(format!("optimizer state {} is {:?} {:?}, expected F32 [{}]", opt.len(), t.dtype(), t.shape(), layout.param_len))
            })?;
            let mut v = limits::zeroed("an optimizer state", layout.param_len).map_err(|e| bad(e.to_string()))?;
            read(&t, &mut v);
            opt.push(v);
        }
        if let Some(n) = meta.get("normalization") {
            let n: Value = serde_json::from_str(n).map_err(|e| bad(format!("normalization: {e}")))?;
            let mean: Vec<f32> = serde_json::from_value(n["mean"].clone()).map_err(|e| bad(format!("normalization: {e}")))?;
            let std: Vec<f32> = serde_json::from_value(n["std"].clone()).map_err(|e| bad(format!("normalization: {e}")))?;
            model.set_normalization(mean, std).map_err(|e| bad(e.to_string()))?;
        }
        // The weights were trained on this normalisation (a file without one: the defaults).
        model.normalization_fixed = true;
        if let Some(names) = meta.get("class_names") {
            let names: Vec<String> = serde_json::from_str(names).map_err(|e| bad(format!("class_names: {e}")))?;
            let classes = layout.shapes.last().and_then(|s| s.first()).copied().unwrap_or(0);
            if names.len() != classes {
                return Err(bad(format!("{} class names for a model of {classes} classes", names.len())));
            }
            model.class_names = names;
        }
        let training = match meta.get("training") {
            None => None,
            Some(t) => {
                let t: Value = serde_json::from_str(t).map_err(|e| bad(format!("training state: {e}")))?;
                let field = |k: &str| t.get(k).cloned().ok_or_else(|| bad(format!("training state lacks {k}")));
                // A negative or fractional position was read as 0 before: resuming would
                // silently restart the schedule.
                let count = |k: &str| -> Result<u64> {
                    let v = field(k)?;
                    v.as_u64().ok_or_else(|| bad(format!("training state {k} {v} is not a non-negative integer")))
                };
                Some(TrainingState {
                    optimizer: serde_json::from_value(field("optimizer")?).map_err(|e| bad(format!("optimizer: {e}")))?,
                    loss: serde_json::from_value(field("loss")?).map_err(|e| bad(format!("loss: {e}")))?,
                    metrics: serde_json::from_value(field("metrics")?).map_err(|e| bad(format!("metrics: {e}")))?,
                    step: count("step")?,
                    epoch: usize::try_from(count("epoch")?).map_err(|_| bad(format!("training state epoch {} does not fit this machine", t["epoch"])))?,
                    learning_rate: field("learning_rate")?.as_f64().ok_or_else(|| bad(format!("training state learning_rate {} is not a number", t["learning_rate"])))? as f32,
                    label_smoothing: match t.get("label_smoothing") {
                        None => 0.0,
                        Some(v) => v.as_f64().ok_or_else(|| bad(format!("training state label_smoothing {v} is not a number")))? as f32,
                    },
                })
            }
        };
        model.pending_weights = Some((params, states, opt));
        Ok((model, training))
    }

    /// An uncompiled model from its architecture JSON (`{"input_shape": [h, w, c], "layers":
    /// [{"class_name", "config"}, ..]}`, what [`Sequential::architecture`] writes). The input
    /// must be three positive sides within [`MAX_SIDE`] (channels within [`MAX_UNITS`]), and
    /// the layers must fit the caps of [`crate::limits`]; the layout is checked here, so a
    /// model returned is one whose parameters and activations can be sized.
    pub fn from_architecture(arch: &Value) -> Result<Sequential> {
        let input: Vec<usize> = serde_json::from_value(arch["input_shape"].clone()).map_err(|e| Error::Config(format!("input_shape: {e}")))?;
        let &[h, w, c] = input.as_slice() else {
            return Err(Error::Config(format!("input_shape must be [height, width, channels], got {input:?}")));
        };
        if input.contains(&0) {
            return Err(Error::Config(format!("input_shape {input:?} has a zero side")));
        }
        limits::at_most("input_shape height", h, MAX_SIDE)?;
        limits::at_most("input_shape width", w, MAX_SIDE)?;
        limits::at_most("input_shape channels", c, MAX_UNITS)?;
        let mut model = Sequential::new(&input);
        let list = arch["layers"].as_array().ok_or_else(|| Error::Config("architecture has no layer list".into()))?;
        limits::at_most("layers in the architecture", list.len(), MAX_UNITS)?;
        for (i, l) in list.iter().enumerate() {
            model.add_boxed(layer_from_config(l)?);
            // Keras' `trainable` (absent, as in files written before it was saved: trainable).
            match l.get("config").and_then(|c| c.get("trainable")) {
                None | Some(Value::Bool(true)) => {}
                Some(Value::Bool(false)) => model.set_trainable(i, false)?,
                Some(v) => return Err(Error::Config(format!("layer {i}: `trainable` must be true or false, got {v}"))),
            }
            // A functional model's layers each name what they read; a stack's name nothing.
            match l.get("inbound") {
                None if model.def.inbound.is_empty() => {}
                None => return Err(Error::Config(format!("layer {i} has no `inbound` list but the layers before it have"))),
                Some(v) => {
                    if model.def.inbound.len() != i {
                        return Err(Error::Config(format!("layer {i} has an `inbound` list but the layers before it have none")));
                    }
                    let from: Vec<usize> = v
                        .as_array()
                        .filter(|a| !a.is_empty() && a.len() <= list.len())
                        .and_then(|a| a.iter().map(|j| j.as_u64().map(|j| j as usize)).collect())
                        .ok_or_else(|| Error::Config(format!("layer {i}: `inbound` must be a non-empty list of node numbers, got {v}")))?;
                    model.def.inbound.push(from);
                }
            }
        }
        model.def.build_layout()?;
        Ok(model)
    }

    /// Loads a model and compiles it for `devices` with its saved optimizer, loss, metrics
    /// and training position, ready to `evaluate`, `predict`, or continue `fit`.
    pub fn load_compiled(path: impl AsRef<Path>, devices: Vec<Arc<Device>>, max_batch: usize) -> Result<Sequential> {
        Self::load_compiled_with(path, devices, max_batch, DTypePolicy::Float32)
    }

    /// [`Sequential::load_compiled`] under a precision policy: files hold f32 weights, which
    /// load into either policy.
    pub fn load_compiled_with(path: impl AsRef<Path>, devices: Vec<Arc<Device>>, max_batch: usize, policy: DTypePolicy) -> Result<Sequential> {
        let (mut model, training) = Sequential::load(path)?;
        model.set_dtype_policy(policy);
        let t = training.unwrap_or(TrainingState {
            optimizer: Optimizer::sgd(0.01),
            loss: Loss::SparseCategoricalCrossentropy,
            metrics: vec![Metric::Accuracy],
            step: 0,
            epoch: 0,
            learning_rate: 0.01,
            label_smoothing: 0.0,
        });
        model.compile(CompileOptions::new(t.optimizer).loss(t.loss).metrics(t.metrics).devices(devices).max_batch(max_batch).label_smoothing(t.label_smoothing))?;
        let c = model.compiled.as_mut().unwrap();
        c.step = t.step;
        c.epoch = t.epoch;
        c.learning_rate = t.learning_rate;
        Ok(model)
    }
}

/// Writes `bytes` to `path` through a temporary sibling and a rename, so that `path` holds
/// either the old content or the new, never a part. The file is synced before the rename and
/// the directory after it: without the second sync a power cut can lose the rename (the
/// directory entry) of a save that has already returned. Temporary files that killed saves
/// left in the directory are removed first.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes).map_err(|e| Error::io(path, e)))
}

/// [`write_atomic`] for output too large to hold in memory (a packed data set): `write` streams
/// it into the temporary file, which becomes `path` only once `write` has returned `Ok` and the
/// data is synced; on an error the temporary file is removed and `path` left as it was.
pub fn write_atomic_with(path: &Path, write: impl FnOnce(&mut std::fs::File) -> Result<()>) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| Error::Config(format!("{} is not a file path", path.display())))?;
    remove_stale_temporaries(dir, &name.to_string_lossy());
    let tmp = dir.join(format!(".{}{TMP_MARK}{}", name.to_string_lossy(), std::process::id()));
    let io = |e: std::io::Error| Error::io(path, e);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        write(&mut f)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        sync_dir(dir).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What separates the target's name from the writer's process id in a temporary file's name:
/// `.checkpoint.safetensors.tmp-4242`.
const TMP_MARK: &str = ".tmp-";

/// Makes the directory entries of `dir` durable (the rename of a finished save).
#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Windows cannot open a directory as a file; NTFS journals the rename itself.
#[cfg(not(unix))]
fn sync_dir(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Removes the temporary files of `write_atomic` in `dir` whose writer no longer runs: a save
/// killed between create and rename. Where processes cannot be looked up (no `/proc`), only
/// those of `name` from other processes go, as a concurrent save of the same file races anyway.
/// Failures are ignored: a leftover costs disk space, not correctness.
fn remove_stale_temporaries(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let proc_fs = Path::new("/proc/self").exists();
    let me = std::process::id();
    for entry in entries.flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let Some((target, pid)) = file.strip_prefix('.').and_then(|f| f.rsplit_once(TMP_MARK)) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let stale = if proc_fs { pid != me && !Path::new("/proc").join(pid.to_string()).exists() } else { target == name && pid != me };
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
