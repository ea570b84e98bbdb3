//! Every file convoy reads, mutated: a model file, an architecture JSON and a CIFAR binary.
//!
//! Each format starts from a valid file and is mutated by seeded bit flips, truncation at
//! every section boundary, header edits and every size field set to 0, -1, 2^31, 2^62 and
//! 1e30. Each mutant is loaded in a child process (this test binary, re-run on the ignored
//! `child` test with the case in its environment) under a timeout, so that an abort, a
//! panic or a hang is seen as such; each must end in `Ok` or exit 1 with one `error:` line.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use convoy::data::{Dataset, Loader, cifar10_from_bytes, cifar100_from_bytes, synthetic};
use convoy::layers::*;
use convoy::model::{CompileOptions, Sequential};
use convoy::optim::Optimizer;
use serde_json::{Value, json};

/// The architecture's size fields: each set to 2^62 or 1e30 must be refused, naming it.
const SIZE_FIELDS: [&str; 7] = ["input_shape", "units", "filters", "kernel_size", "strides", "padding", "pool_size"];

/// The key a JSON pointer ends in, skipping array indices: `/layers/0/config/kernel_size/1`
/// is `kernel_size`.
fn field(pointer: &str) -> &str {
    pointer.rsplit('/').find(|s| s.parse::<usize>().is_err()).unwrap_or("")
}

/// How long one child may take: a load is milliseconds, but the CI machine may be busy.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The values every size field is set to (as JSON: -1 and 1e30 are not integers of any
/// width the reader takes).
const SIZES: [&str; 5] = ["0", "-1", "2147483648", "4611686018427387904", "1e30"];

mod common;
use common::{convoy, fails_with, tmp};

/// SplitMix64: the mutations are the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `count` copies of `bytes`, each with one bit flipped; half of them inside `hot` (the
/// header, where a flip changes a size rather than a weight).
fn bit_flips(bytes: &[u8], hot: std::ops::Range<usize>, count: usize, seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|k| {
            let at = if k % 2 == 0 && !hot.is_empty() { hot.start + rng.below(hot.len()) } else { rng.below(bytes.len()) };
            let bit = rng.below(8);
            let mut b = bytes.to_vec();
            b[at] ^= 1 << bit;
            (format!("bit {bit} of byte {at} flipped"), b)
        })
        .collect()
}

/// Truncations at each of `boundaries` and one byte either side.
fn truncations(bytes: &[u8], boundaries: &[usize]) -> Vec<(String, Vec<u8>)> {
    let mut cuts: Vec<usize> = boundaries.iter().flat_map(|&b| [b.saturating_sub(1), b, b + 1]).filter(|&c| c < bytes.len()).collect();
    cuts.sort();
    cuts.dedup();
    cuts.into_iter().map(|c| (format!("truncated to {c} bytes"), bytes[..c].to_vec())).collect()
}

/// Every number in `v` (recursively), as a JSON pointer.
fn number_pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| number_pointers(x, format!("{at}/{i}"), out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| number_pointers(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out)),
        _ => {}
    }
}

/// `v` with the number at `pointer` replaced by the literal `value`.
fn with_number(v: &Value, pointer: &str, value: &str) -> Value {
    let mut v = v.clone();
    *v.pointer_mut(pointer).unwrap() = serde_json::from_str(value).unwrap();
    v
}

/// What a child printed and how it ended.
#[derive(Debug)]
enum Outcome {
    Ok,
    Error(String),
}

/// Runs every case in a child process, two at a time, and checks each ended in `Ok` or one
/// clear error line. Returns the outcomes in case order.
fn run_children(format: &str, cases: Vec<(String, Vec<u8>)>) -> Vec<(String, Outcome)> {
    let dir = tmp(format);
    let exe = std::env::current_exe().unwrap();
    let next = Arc::new(Mutex::new(0usize));
    let cases = Arc::new(cases);
    let results = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (next, cases, results, dir, exe, format) = (next.clone(), cases.clone(), results.clone(), dir.clone(), exe.clone(), format.to_string());
            std::thread::spawn(move || {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some((name, bytes)) = cases.get(i) else { return };
                    let path = dir.join(format!("case-{i}"));
                    std::fs::write(&path, bytes).unwrap();
                    let outcome = run_child(&exe, &format, &path);
                    let _ = std::fs::remove_file(&path);
                    results.lock().unwrap().push((i, name.clone(), outcome));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut results = std::mem::take(&mut *results.lock().unwrap());
    results.sort_by_key(|r| r.0);
    if std::env::var_os("CONVOY_MUTANT_DUMP").is_some() {
        for (i, name, r) in &results {
            eprintln!("{format} {i} {name}: {r:?}");
        }
    }
    let mut failures = Vec::new();
    let mut out = Vec::new();
    for (i, name, r) in results {
        match r {
            Ok(o) => out.push((name, o)),
            Err(why) => failures.push(format!("{format} case {i} ({name}): {why}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} mutants did not end cleanly:\n{}", failures.len(), cases.len(), failures.join("\n"));
    out
}

/// One child: loads `path` as `format`; `Ok` on exit 0, the error line on exit 1 with one
/// `error:` line on standard error, and a description of anything else.
fn run_child(exe: &Path, format: &str, path: &Path) -> Result<Outcome, String> {
    let mut c = Command::new(exe)
        .args(["child", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("CONVOY_MUTANT_FORMAT", format)
        .env("CONVOY_MUTANT_PATH", path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = c.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = c.kill();
            let _ = c.wait();
            return Err(format!("still running after {TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stderr = reader.join().unwrap();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if stderr.contains("panicked") || stderr.contains("memory allocation of") {
        return Err(format!("{status}: {stderr}"));
    }
    match status.code() {
        Some(0) if lines.is_empty() => Ok(Outcome::Ok),
        Some(1) if lines.len() == 1 && lines[0].starts_with("error: ") => Ok(Outcome::Error(lines[0].to_string())),
        _ => Err(format!("{status}, stderr: {stderr}")),
    }
}

/// The child: loads the file named by the environment as its format, then does what a
/// reader does next with it (data at a model's input size, a batch of the data), and exits
/// 0 or 1 with one error line. Run by the mutation tests; does nothing on its own.
#[test]
#[ignore = "the child process of the mutation tests"]
fn child() {
    let (Ok(format), Ok(path)) = (std::env::var("CONVOY_MUTANT_FORMAT"), std::env::var("CONVOY_MUTANT_PATH")) else { return };
    let path = PathBuf::from(path);
    let result = match format.as_str() {
        "model" => load_model(&path),
        "architecture" => load_architecture(&path),
        "cifar" => load_cifar(&path),
        other => panic!("unknown format {other}"),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    }
}

/// What `convoy evaluate` does before it needs a GPU: load, summarise, draw data at the
/// model's input size and fill a batch of it.
fn load_model(path: &Path) -> convoy::Result<()> {
    let (model, _) = Sequential::load(path)?;
    model.summary()?;
    let data = synthetic(2, model.input_shape()[0], 0)?;
    first_batch(Arc::new(data))
}

fn load_architecture(path: &Path) -> convoy::Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| convoy::Error::io(path, e))?;
    let arch: Value = serde_json::from_str(&text).map_err(|e| convoy::Error::format(path, e.to_string()))?;
    let model = Sequential::from_architecture(&arch)?;
    model.summary()?;
    Ok(())
}

fn load_cifar(path: &Path) -> convoy::Result<()> {
    let bytes = std::fs::read(path).map_err(|e| convoy::Error::io(path, e))?;
    // The same bytes as both layouts: a CIFAR-10 record is a byte shorter.
    let ten = cifar10_from_bytes(&bytes, path);
    let hundred = cifar100_from_bytes(&bytes, path);
    match (ten, hundred) {
        (Ok(a), _) => first_batch(Arc::new(a)),
        (_, Ok(b)) => first_batch(Arc::new(b)),
        (Err(e), _) => Err(e),
    }
}

fn first_batch(data: Arc<dyn Dataset>) -> convoy::Result<()> {
    let n = data.len();
    let mut loader = Loader::new(data, (0..n).collect(), 2, false, None, 0, 1)?;
    loader.next().transpose()?;
    Ok(())
}

// ---------------------------------------------------------------- the valid files

/// A small model with every layer class and size field: conv with explicit padding and
/// strides, BatchNorm, a residual block with a projection, max pooling, dropout and dense;
/// compiled with momentum so the file holds an optimizer state.
fn valid_model(path: &Path) -> Sequential {
    let mut m = Sequential::new(&[6, 6, 3]);
    m.add(Conv2D::new(4, 3).padding(Padding::Explicit(1, 1)).strides(1));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    let main: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(2, 3).padding(Padding::Same)), Box::new(BatchNormalization::new())];
    let shortcut: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(2, 1))];
    m.add(Residual::new(main, shortcut));
    m.add(MaxPool2D::new(2));
    m.add(Flatten::new());
    m.add(Dropout::new(0.25));
    m.add(Dense::new(5));
    m.compile(CompileOptions::new(Optimizer::sgd(0.1).momentum(0.9)).devices(convoy::device::open("software").unwrap()).seed(3).max_batch(4))
    .unwrap();
    m.save(path).unwrap();
    m
}

/// A safetensors file from its header (JSON) and data section.
fn safetensors_file(header: &Value, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string().into_bytes();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

fn split_safetensors(bytes: &[u8]) -> (Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), bytes[8 + n..].to_vec())
}

// ---------------------------------------------------------------- the tests

#[test]
fn mutated_model_files_end_in_ok_or_one_error_line() {
    let dir = tmp("model-seed");
    let path = dir.join("m.safetensors");
    valid_model(&path);
    let bytes = std::fs::read(&path).unwrap();
    let (header, data) = split_safetensors(&bytes);
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut cases: Vec<(String, Vec<u8>)> = vec![("the valid file".into(), bytes.clone())];

    cases.extend(bit_flips(&bytes, 0..header_end, 160, 19));
    // Sections: the length prefix, the header, and each tensor's data.
    let mut boundaries = vec![0, 4, 8, header_end];
    for (name, t) in header.as_object().unwrap() {
        if name != "__metadata__" {
            let o = &t["data_offsets"];
            boundaries.extend([header_end + o[0].as_u64().unwrap() as usize, header_end + o[1].as_u64().unwrap() as usize]);
        }
    }
    boundaries.push(8 + (header_end - 8) / 2);
    cases.extend(truncations(&bytes, &boundaries));
    // The length prefix.
    for n in [0u64, u64::MAX, 1 << 31, 1 << 62, header_end as u64] {
        let mut b = bytes.clone();
        b[..8].copy_from_slice(&n.to_le_bytes());
        cases.push((format!("header length {n}"), b));
    }
    // Every number of the tensor table (shapes and data offsets), and each dtype.
    let mut pointers = Vec::new();
    for (name, t) in header.as_object().unwrap() {
        if name != "__metadata__" {
            number_pointers(t, format!("/{}", name.replace('~', "~0").replace('/', "~1")), &mut pointers);
            for dtype in ["F16", "I64", "BOOL", "Q4"] {
                let mut h = header.clone();
                h[name.as_str()]["dtype"] = json!(dtype);
                cases.push((format!("{name} dtype {dtype}"), safetensors_file(&h, &data)));
            }
        }
    }
    for p in &pointers {
        for v in SIZES {
            cases.push((format!("{p} = {v}"), safetensors_file(&with_number(&header, p, v), &data)));
        }
    }
    // Every number of the metadata's JSON strings: architecture sizes, normalisation,
    // training position.
    let meta = header["__metadata__"].as_object().unwrap().clone();
    let mut arch_fields = Vec::new();
    for (key, text) in &meta {
        let Ok(v) = serde_json::from_str::<Value>(text.as_str().unwrap()) else { continue };
        let mut pointers = Vec::new();
        number_pointers(&v, String::new(), &mut pointers);
        for p in pointers {
            for s in SIZES {
                let mut h = header.clone();
                h["__metadata__"][key.as_str()] = json!(with_number(&v, &p, s).to_string());
                if key == "architecture" {
                    arch_fields.push((cases.len(), p.clone(), s));
                }
                cases.push((format!("{key}{p} = {s}"), safetensors_file(&h, &data)));
            }
        }
    }
    let count = cases.len();
    let started = Instant::now();
    let outcomes = run_children("model", cases);
    assert!(matches!(outcomes[0].1, Outcome::Ok), "the valid file: {:?}", outcomes[0].1);
    // Every error names the file.
    for (name, o) in &outcomes {
        if let Outcome::Error(line) = o {
            assert!(line.contains("m.safetensors") || line.contains("case-"), "{name}: {line}");
        }
    }
    // A size of 2^62 or 1e30 anywhere in the architecture is refused, naming the field.
    for (i, pointer, value) in arch_fields {
        let field = field(&pointer);
        if SIZE_FIELDS.contains(&field) && (value == "4611686018427387904" || value == "1e30") {
            let Outcome::Error(line) = &outcomes[i].1 else { panic!("architecture{pointer} = {value} loaded") };
            assert!(line.contains(field), "architecture{pointer} = {value}: `{line}` does not name {field}");
        }
    }
    // A negative position was read as 0 (resuming restarted the schedule).
    for key in ["step", "epoch"] {
        let (name, o) = outcomes.iter().find(|(n, _)| n == &format!("training/{key} = -1")).unwrap();
        assert!(matches!(o, Outcome::Error(l) if l.contains(&format!("training state {key} -1 is not a non-negative integer"))), "{name}: {o:?}");
    }
    eprintln!("{count} model mutants in {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn mutated_architectures_end_in_ok_or_one_error_line() {
    let mut m = Sequential::new(&[6, 6, 3]);
    m.add(Conv2D::new(4, 3).padding(Padding::Explicit(1, 1)));
    m.add(BatchNormalization::new());
    let main: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(2, 3).padding(Padding::Same).strides(2))];
    let shortcut: Vec<Box<dyn Layer>> = vec![Box::new(Conv2D::new(2, 1).strides(2))];
    m.add(Residual::new(main, shortcut));
    m.add(AveragePooling2D::new(3));
    m.add(Flatten::new());
    m.add(Dense::new(7));
    let arch = m.architecture();
    let text = arch.to_string();
    let mut cases: Vec<(String, Vec<u8>)> = vec![("the valid architecture".into(), text.clone().into_bytes())];
    cases.extend(bit_flips(text.as_bytes(), 0..text.len(), 120, 20));
    // Every structural character is a section boundary of JSON.
    let boundaries: Vec<usize> = text.char_indices().filter(|(_, c)| "{}[],:".contains(*c)).map(|(i, _)| i).collect();
    cases.extend(truncations(text.as_bytes(), &boundaries));
    let mut pointers = Vec::new();
    number_pointers(&arch, String::new(), &mut pointers);
    let first_size_case = cases.len();
    for p in &pointers {
        for v in SIZES {
            cases.push((format!("{p} = {v}"), with_number(&arch, p, v).to_string().into_bytes()));
        }
    }
    // Header edits: the input shape's rank, layers that are not objects, and residual
    // blocks nested up to and past the cap (shapes are walked once per level).
    for input in ["[]", "[6]", "[6, 6]", "[6, 6, 3, 1]", "\"6x6\"", "null"] {
        let mut a = arch.clone();
        a["input_shape"] = serde_json::from_str(input).unwrap();
        cases.push((format!("input_shape {input}"), a.to_string().into_bytes()));
    }
    for layers in ["null", "{}", "[1]", "[[]]", "[{\"class_name\": \"Dense\"}]", "[{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}]"] {
        let mut a = arch.clone();
        a["layers"] = serde_json::from_str(layers).unwrap();
        cases.push((format!("layers {layers}"), a.to_string().into_bytes()));
    }
    for depth in [1, 8, 9, 40] {
        let mut layer = json!({ "class_name": "ReLU", "config": {} });
        for _ in 0..depth {
            layer = json!({ "class_name": "Residual", "config": { "main": [layer], "shortcut": [] } });
        }
        let a = json!({ "input_shape": [4, 4, 2], "layers": [layer, { "class_name": "Flatten", "config": {} }, { "class_name": "Dense", "config": { "units": 3 } }] });
        cases.push((format!("residual blocks nested {depth} deep"), a.to_string().into_bytes()));
    }
    let count = cases.len();
    let started = Instant::now();
    let outcomes = run_children("architecture", cases);
    assert!(matches!(outcomes[0].1, Outcome::Ok), "the valid architecture: {:?}", outcomes[0].1);
    for (k, p) in pointers.iter().enumerate() {
        let field = field(p);
        if !SIZE_FIELDS.contains(&field) {
            continue;
        }
        for j in 3..SIZES.len() {
            let (name, o) = &outcomes[first_size_case + k * SIZES.len() + j];
            let Outcome::Error(line) = o else { panic!("{name} loaded") };
            assert!(line.contains(field), "{name}: `{line}` does not name {field}");
        }
    }
    let nested = |d: usize| &outcomes[outcomes.len() - 4 + [1, 8, 9, 40].iter().position(|&x| x == d).unwrap()].1;
    assert!(matches!(nested(8), Outcome::Ok), "{:?}", nested(8));
    assert!(matches!(nested(9), Outcome::Error(l) if l.contains("nested more than 8")), "{:?}", nested(9));
    eprintln!("{count} architecture mutants in {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn mutated_cifar_files_end_in_ok_or_one_error_line() {
    // Three CIFAR-10 records: a label byte, then three 32x32 planes.
    let record = 1 + 3 * 32 * 32;
    let mut rng = Rng(21);
    let mut bytes = Vec::new();
    for label in [3u8, 9, 0] {
        bytes.push(label);
        bytes.extend((0..record - 1).map(|_| rng.next() as u8));
    }
    let mut cases: Vec<(String, Vec<u8>)> = vec![("three valid records".into(), bytes.clone())];
    cases.extend(bit_flips(&bytes, 0..1, 40, 22));
    // Record, label and plane boundaries of both layouts.
    let mut boundaries = vec![0, 1, 2];
    for r in 0..=3 {
        boundaries.extend([r * record, r * (record + 1), r * record + 1 + 1024, r * record + 1 + 2048]);
    }
    cases.extend(truncations(&bytes, &boundaries));
    // The label is the format's only declared value: every byte value at each record's
    // label, and records that disagree on the layout.
    for label in [0u8, 9, 10, 99, 100, 255] {
        let mut b = bytes.clone();
        b[record] = label;
        cases.push((format!("second label {label}"), b));
    }
    cases.push(("an empty file".into(), Vec::new()));
    cases.push(("one record and one CIFAR-100 record".into(), [&bytes[..record], &bytes[..record + 1]].concat()));
    let count = cases.len();
    let started = Instant::now();
    let outcomes = run_children("cifar", cases);
    assert!(matches!(outcomes[0].1, Outcome::Ok), "the valid records: {:?}", outcomes[0].1);
    let label = |l: u8| &outcomes.iter().find(|(n, _)| n == &format!("second label {l}")).unwrap().1;
    assert!(matches!(label(9), Outcome::Ok));
    // 10 is out of range for CIFAR-10, and 3 x 3073 bytes are not CIFAR-100 records.
    assert!(matches!(label(10), Outcome::Error(l) if l.contains("label 10")), "{:?}", label(10));
    eprintln!("{count} CIFAR mutants in {:.1} s", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------- the aborts of issue 19


/// `path`'s model with `edit` applied to its architecture, written to `out`.
fn edit_architecture(path: &Path, out: &Path, edit: impl Fn(&mut Value)) {
    let (mut header, data) = split_safetensors(&std::fs::read(path).unwrap());
    let mut arch: Value = serde_json::from_str(header["__metadata__"]["architecture"].as_str().unwrap()).unwrap();
    edit(&mut arch);
    header["__metadata__"]["architecture"] = json!(arch.to_string());
    std::fs::write(out, safetensors_file(&header, &data)).unwrap();
}

/// A Dense `units` of 1e12 aborted (`memory allocation of 12804000000005888 bytes failed`)
/// and 1e30 panicked with `capacity overflow`, both in `load`; a ResNet-20 declaring a
/// 1,048,576 px input loaded, then aborted sizing a batch of that input.
#[test]
fn absurd_declared_sizes_are_one_error_line_in_evaluate() {
    let dir = tmp("issue19");
    let mlp = dir.join("mlp.safetensors");
    let args = ["train", "--epochs", "1", "--save", mlp.to_str().unwrap(), "--devices", "software", "--data", "synthetic:64,16", "--image-size", "8", "--model", "mlp"];
    let out = convoy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (units, shown) in [("1000000000000", "1000000000000"), ("1e12", "1000000000000.0"), ("1e30", "1e30")] {
        let bad = dir.join(format!("units-{units}.safetensors"));
        edit_architecture(&mlp, &bad, |a| a["layers"][1]["config"]["units"] = serde_json::from_str(units).unwrap());
        let file = bad.file_name().unwrap().to_str().unwrap();
        fails_with(&convoy(&["evaluate", "--load", bad.to_str().unwrap(), "--devices", "software"]), &[file, "Dense `units`", shown, "16777216"]);
    }

    let resnet = dir.join("resnet20.safetensors");
    let mut m = convoy::model::zoo::resnet20(&[8, 8, 3], 2);
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(convoy::device::open("software").unwrap()).max_batch(2))
    .unwrap();
    m.save(&resnet).unwrap();
    let huge = dir.join("huge-input.safetensors");
    edit_architecture(&resnet, &huge, |a| a["input_shape"] = json!([1048576, 1048576, 3]));
    let folder = dir.join("folder");
    for split in ["train", "val"] {
        for class in ["a", "b"] {
            std::fs::create_dir_all(folder.join(split).join(class)).unwrap();
            image::RgbImage::from_pixel(9, 7, image::Rgb([10, 200, 30])).save(folder.join(split).join(class).join("x.png")).unwrap();
        }
    }
    let data = format!("folder:{}", folder.display());
    for data in [data.as_str(), "synthetic:20,20"] {
        fails_with(&convoy(&["evaluate", "--load", huge.to_str().unwrap(), "--data", data, "--devices", "software"]), &["huge-input.safetensors", "input_shape height", "1048576", "65536"]);
    }
    // Within each side's cap but 2.1 GB a sample: the first convolution's output is refused.
    let big = dir.join("big-input.safetensors");
    edit_architecture(&resnet, &big, |a| a["input_shape"] = json!([26000, 26000, 3]));
    fails_with(&convoy(&["evaluate", "--load", big.to_str().unwrap(), "--data", &data, "--devices", "software"]), &["big-input.safetensors", "output shape", "2147483648"]);
}

/// A model that is valid but whose input would make a batch of 2 GB samples: the data
/// readers refuse it before allocating (the folder at the model's input size, the synthetic
/// set, the loader's batch).
#[test]
fn readers_refuse_sizes_past_their_caps() {
    let e = synthetic(2000, 20000, 0).unwrap_err().to_string();
    assert!(e.contains("synthetic data bytes") && e.contains("68719476736"), "{e}");
    let e = synthetic(2, 70000, 0).unwrap_err().to_string();
    assert!(e.contains("synthetic image size is 70000, above the cap of 65536"), "{e}");
    let dir = tmp("readers");
    for split in ["train", "val"] {
        std::fs::create_dir_all(dir.join(split).join("a")).unwrap();
        image::RgbImage::from_pixel(1, 300, image::Rgb([1, 2, 3])).save(dir.join(split).join("a").join("strip.png")).unwrap();
    }
    let e = convoy::data::ImageFolder::open(&dir, "train", 30000).unwrap_err().to_string();
    assert!(e.contains("sample shape [30000, 30000, 3] is 2700000000, above the cap of 2147483648"), "{e}");
    // A 1 x 300 strip at a 2,000 px short side would be resized to 2,000 x 600,000 (3.6 GB). A
    // sample resamples only the window its crop keeps (here one pixel of the strip): it loads
    // with nothing allocated past the sample.
    let folder = convoy::data::ImageFolder::open(&dir, "train", 2000).unwrap();
    let mut out = vec![0u8; folder.sample_bytes()];
    folder.load(0, &mut out).unwrap();
    assert!(out.chunks_exact(3).all(|p| p == [1, 2, 3]));
    // Packing stores the whole resized image: it is refused before anything is allocated, and
    // no file is left.
    let packed = dir.join("strip.pack");
    let e = convoy::data::pack_folder(&dir, 20000, &packed).unwrap_err().to_string();
    assert!(e.contains("strip.png") && e.contains("image 1x300 resized to a short side of 20000") && e.contains("2147483648"), "{e}");
    assert!(!packed.exists());
    let folder = convoy::data::ImageFolder::open(&dir, "train", 20000).unwrap();
    // 20,000 px samples are 1.2 GB: a batch of 16 passes the 16 GiB cap, the loader refuses it.
    let e = Loader::new(Arc::new(folder), vec![0], 16, false, None, 0, 1).err().unwrap().to_string();
    assert!(e.contains("batch bytes") && e.contains("17179869184"), "{e}");
}
