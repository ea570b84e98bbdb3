//! Callbacks driven with hand-made logs and a fake saver; no GPU. Expected behaviour follows
//! Keras 3's `keras/src/callbacks/*.py`.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use convoy::callbacks::{
    Callback, Context, CsvLogger, EarlyStopping, History, LearningRateScheduler, Logs, Mode, ModelCheckpoint,
    ProgressBar, ReduceLROnPlateau, Saver, TerminateOnNaN,
};
use convoy::{Error, Result};

/// Records the paths it is asked to save to; fails for paths containing "fail".
#[derive(Default)]
struct FakeSaver {
    paths: RefCell<Vec<PathBuf>>,
}

impl Saver for FakeSaver {
    fn save(&self, path: &Path) -> Result<()> {
        if path.to_string_lossy().contains("fail") {
            return Err(Error::io(path, std::io::Error::from(std::io::ErrorKind::NotFound)));
        }
        self.paths.borrow_mut().push(path.to_path_buf());
        Ok(())
    }
}

impl FakeSaver {
    fn saved(&self) -> Vec<String> {
        self.paths.borrow().iter().map(|p| p.to_string_lossy().into_owned()).collect()
    }
}

fn ctx(saver: &FakeSaver, epochs: usize, steps_per_epoch: usize) -> Context<'_> {
    Context { stop_training: false, learning_rate: 1.0, epochs, steps_per_epoch, samples: steps_per_epoch * 32, saver }
}

fn logs(pairs: &[(&str, f64)]) -> Logs {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Calls `cb`'s epoch hooks once per value of `key`, as `fit` would, until it asks to stop.
/// Returns the epoch at whose end training stopped.
fn run_epochs(cb: &mut dyn Callback, ctx: &mut Context, key: &str, series: &[f64]) -> Result<Option<usize>> {
    cb.on_train_begin(ctx)?;
    for (epoch, &value) in series.iter().enumerate() {
        cb.on_epoch_begin(epoch, ctx)?;
        cb.on_epoch_end(epoch, &logs(&[("loss", 0.5), (key, value)]), ctx)?;
        if ctx.stop_training {
            return Ok(Some(epoch));
        }
    }
    Ok(None)
}

/// A stand-in for `fit`: the hooks in Keras' order over several callbacks, honouring
/// `stop_training` after a batch and after an epoch. Returns the number of batches run.
fn fit(cbs: &mut [&mut dyn Callback], ctx: &mut Context, batch: impl Fn(usize, usize) -> Logs) -> Result<usize> {
    let mut ran = 0;
    let mut last = Logs::new();
    for cb in cbs.iter_mut() {
        cb.on_train_begin(ctx)?;
    }
    'epochs: for epoch in 0..ctx.epochs {
        for cb in cbs.iter_mut() {
            cb.on_epoch_begin(epoch, ctx)?;
        }
        for b in 0..ctx.steps_per_epoch {
            for cb in cbs.iter_mut() {
                cb.on_batch_begin(b, ctx)?;
            }
            last = batch(epoch, b);
            ran += 1;
            for cb in cbs.iter_mut() {
                cb.on_batch_end(b, &last, ctx)?;
            }
            if ctx.stop_training {
                break 'epochs;
            }
        }
        for cb in cbs.iter_mut() {
            cb.on_epoch_end(epoch, &last, ctx)?;
        }
        if ctx.stop_training {
            break;
        }
    }
    for cb in cbs.iter_mut() {
        cb.on_train_end(&last, ctx)?;
    }
    Ok(ran)
}

fn config_message(err: Error) -> String {
    match err {
        Error::Config(msg) => msg,
        other => panic!("expected Error::Config, got {other:?}"),
    }
}

/// A fresh directory under the system temp dir for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("convoy-callbacks-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn early_stopping_table() {
    struct Case {
        name: &'static str,
        stop: EarlyStopping,
        key: &'static str,
        series: &'static [f64],
        stopped: Option<usize>,
    }
    let cases = [
        Case {
            name: "patience 0 stops at the first stall",
            stop: EarlyStopping::new("val_loss"),
            key: "val_loss",
            series: &[1.0, 0.9, 0.95, 0.8],
            stopped: Some(2),
        },
        Case {
            name: "patience 2 waits two stalled epochs",
            stop: EarlyStopping::new("val_loss").patience(2),
            key: "val_loss",
            series: &[1.0, 0.9, 0.95, 0.91, 0.8],
            stopped: Some(3),
        },
        Case {
            name: "an improvement resets the count",
            stop: EarlyStopping::new("val_loss").patience(2),
            key: "val_loss",
            series: &[1.0, 1.1, 0.9, 1.2, 0.8, 0.85],
            stopped: None,
        },
        Case {
            name: "improvements below min_delta do not count",
            stop: EarlyStopping::new("val_loss").patience(1).min_delta(0.05),
            key: "val_loss",
            series: &[1.0, 0.97, 0.5],
            stopped: Some(1),
        },
        Case {
            name: "auto mode maximises accuracy",
            stop: EarlyStopping::new("val_accuracy").patience(2),
            key: "val_accuracy",
            series: &[0.5, 0.6, 0.7, 0.65, 0.64],
            stopped: Some(4),
        },
        Case {
            name: "explicit min on an accuracy",
            stop: EarlyStopping::new("val_accuracy").patience(2).mode(Mode::Min),
            key: "val_accuracy",
            series: &[0.5, 0.6, 0.7, 0.65, 0.64],
            stopped: Some(2),
        },
        Case {
            name: "explicit max on another name",
            stop: EarlyStopping::new("val_top5").patience(1).mode(Mode::Max),
            key: "val_top5",
            series: &[0.5, 0.6, 0.55],
            stopped: Some(2),
        },
        Case {
            name: "without baseline a stall within patience goes on",
            stop: EarlyStopping::new("val_loss").patience(2),
            key: "val_loss",
            series: &[0.9, 0.8, 0.85],
            stopped: None,
        },
        Case {
            name: "improving above the baseline does not reset patience",
            stop: EarlyStopping::new("val_loss").patience(2).baseline(0.5),
            key: "val_loss",
            series: &[0.9, 0.8, 0.85],
            stopped: Some(2),
        },
        Case {
            name: "beating the baseline resets patience",
            stop: EarlyStopping::new("val_loss").patience(2).baseline(0.5),
            key: "val_loss",
            series: &[0.9, 0.4, 0.45, 0.46],
            stopped: Some(3),
        },
        Case {
            name: "NaN is never an improvement",
            stop: EarlyStopping::new("val_loss").patience(1),
            key: "val_loss",
            series: &[f64::NAN, f64::NAN],
            stopped: Some(1),
        },
    ];
    let saver = FakeSaver::default();
    for mut case in cases {
        let mut ctx = ctx(&saver, case.series.len(), 1);
        let stopped = run_epochs(&mut case.stop, &mut ctx, case.key, case.series).unwrap();
        assert_eq!(stopped, case.stopped, "{}", case.name);
        assert_eq!(case.stop.stopped_epoch(), case.stopped, "{}", case.name);
    }
}

#[test]
fn early_stopping_reports_best_and_resets_between_fits() {
    let saver = FakeSaver::default();
    let mut stop = EarlyStopping::new("val_loss").patience(1);
    let mut c = ctx(&saver, 3, 1);
    assert_eq!(run_epochs(&mut stop, &mut c, "val_loss", &[0.9, 0.7, 0.8]).unwrap(), Some(2));
    assert_eq!((stop.best(), stop.best_epoch()), (Some(0.7), Some(1)));
    let mut c = ctx(&saver, 3, 1);
    assert_eq!(run_epochs(&mut stop, &mut c, "val_loss", &[5.0, 4.0, 3.0]).unwrap(), None);
    assert_eq!(stop.best(), Some(3.0));
}

#[test]
fn early_stopping_missing_key_lists_available_keys() {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 1, 1);
    let mut stop = EarlyStopping::default();
    stop.on_train_begin(&mut c).unwrap();
    let err = stop.on_epoch_end(0, &logs(&[("loss", 0.5), ("accuracy", 0.8)]), &mut c).unwrap_err();
    let msg = config_message(err);
    assert!(msg.contains("\"val_loss\""), "{msg}");
    assert!(msg.contains("available: [accuracy, loss]"), "{msg}");
    assert!(msg.contains("validation data"), "{msg}");
}

#[test]
fn early_stopping_rejects_negative_min_delta() {
    let saver = FakeSaver::default();
    let err = EarlyStopping::default().min_delta(-0.1).on_train_begin(&mut ctx(&saver, 1, 1)).unwrap_err();
    assert!(config_message(err).contains("-0.1"));
}

/// Runs a checkpoint over `val_loss` values and returns the saved paths.
fn checkpoint_paths(ckpt: &mut ModelCheckpoint, key: &str, series: &[f64]) -> Vec<String> {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, series.len(), 1);
    run_epochs(ckpt, &mut c, key, series).unwrap();
    saver.saved()
}

#[test]
fn model_checkpoint_every_epoch_formats_names() {
    let mut ckpt = ModelCheckpoint::new("ckpt/e{epoch:03d}-{val_loss:.4f}.safetensors");
    let saved = checkpoint_paths(&mut ckpt, "val_loss", &[0.5, 0.61236, 0.4]);
    assert_eq!(saved, ["ckpt/e001-0.5000.safetensors", "ckpt/e002-0.6124.safetensors", "ckpt/e003-0.4000.safetensors"]);
    assert_eq!(ckpt.last_saved(), Some(Path::new("ckpt/e003-0.4000.safetensors")));
}

#[test]
fn model_checkpoint_keeps_the_last_finite_epoch() {
    // every-epoch saves to one file: a diverged epoch (NaN or infinite loss or val_loss)
    // must not replace the checkpoint of the last good one
    let mut ckpt = ModelCheckpoint::new("ckpt-{epoch}.st");
    assert_eq!(checkpoint_paths(&mut ckpt, "val_loss", &[0.5, f64::NAN, f64::INFINITY, 0.4]), ["ckpt-1.st", "ckpt-4.st"]);
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 2, 1);
    let mut ckpt = ModelCheckpoint::new("last.st");
    ckpt.on_train_begin(&mut c).unwrap();
    ckpt.on_epoch_end(0, &logs(&[("loss", 0.7), ("val_loss", 0.6)]), &mut c).unwrap();
    ckpt.on_epoch_end(1, &logs(&[("loss", f64::NAN), ("val_loss", 0.6)]), &mut c).unwrap();
    assert_eq!(saver.saved(), ["last.st"]);
    assert_eq!(ckpt.last_saved(), Some(Path::new("last.st")));
}

#[test]
fn model_checkpoint_best_only() {
    let mut ckpt = ModelCheckpoint::new("best-{epoch}.st").save_best_only(true);
    assert_eq!(
        checkpoint_paths(&mut ckpt, "val_loss", &[0.5, 0.6, 0.4, 0.4, f64::NAN, 0.3]),
        ["best-1.st", "best-3.st", "best-6.st"]
    );
    assert_eq!(ckpt.best(), Some(0.3));

    let mut ckpt = ModelCheckpoint::new("acc-{epoch}.st").monitor("val_accuracy").save_best_only(true);
    assert_eq!(checkpoint_paths(&mut ckpt, "val_accuracy", &[0.5, 0.4, 0.7, 0.6]), ["acc-1.st", "acc-3.st"]);

    let mut ckpt = ModelCheckpoint::new("min-{epoch}.st").monitor("val_accuracy").mode(Mode::Min).save_best_only(true);
    assert_eq!(checkpoint_paths(&mut ckpt, "val_accuracy", &[0.5, 0.4, 0.7]), ["min-1.st", "min-2.st"]);
}

#[test]
fn model_checkpoint_filename_table() {
    // (template, Ok(path) or Err(substring of the message)); epoch index 2 is written as 3.
    let cases: [(&str, std::result::Result<&str, &str>); 13] = [
        ("{epoch}", Ok("3")),
        ("m-{epoch:d}", Ok("m-3")),
        ("m-{epoch:4d}", Ok("m-   3")),
        ("{loss}_{val_loss}", Ok("0.25_1.5")),
        ("{val_loss:.2f}", Ok("1.50")),
        ("{batch_size:d}", Ok("64")),
        ("{{epoch}}-{epoch:02d}", Ok("{epoch}-03")),
        ("dir/{epoch}/w.st", Ok("dir/3/w.st")),
        ("{missing}", Err("\"missing\", which is not in the logs; available: [epoch, batch_size, loss, val_loss]")),
        ("{epoch", Err("unclosed '{'")),
        ("a}b", Err("unmatched '}'")),
        ("{loss:x}", Err("unsupported format \"x\"")),
        ("{loss:d}", Err("formats \"loss\" = 0.25 as an integer")),
    ];
    let epoch_logs = logs(&[("loss", 0.25), ("val_loss", 1.5), ("batch_size", 64.0)]);
    for (template, expected) in cases {
        let saver = FakeSaver::default();
        let mut c = ctx(&saver, 3, 1);
        let mut ckpt = ModelCheckpoint::new(template);
        let result = ckpt.on_train_begin(&mut c).and_then(|()| ckpt.on_epoch_end(2, &epoch_logs, &mut c));
        match (result, expected) {
            (Ok(()), Ok(path)) => assert_eq!(saver.saved(), [path], "{template}"),
            (Err(err), Err(part)) => {
                let msg = config_message(err);
                assert!(msg.contains(part) && msg.contains(template), "{template}: {msg}");
            }
            (got, want) => panic!("{template}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn model_checkpoint_errors() {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 1, 1);
    let mut ckpt = ModelCheckpoint::new("best.st").save_best_only(true);
    ckpt.on_train_begin(&mut c).unwrap();
    let msg = config_message(ckpt.on_epoch_end(0, &logs(&[("loss", 0.5)]), &mut c).unwrap_err());
    assert!(
        msg.contains("ModelCheckpoint") && msg.contains("\"val_loss\"") && msg.contains("available: [loss]"),
        "{msg}"
    );

    // Without save_best_only the monitor is not needed.
    let mut ckpt = ModelCheckpoint::new("every.st");
    ckpt.on_epoch_end(0, &logs(&[("loss", 0.5)]), &mut c).unwrap();
    assert_eq!(saver.saved(), ["every.st"]);

    // The saver's error reaches the caller unchanged.
    let mut ckpt = ModelCheckpoint::new("fail/{epoch}.st");
    let err = ckpt.on_epoch_end(0, &logs(&[("loss", 0.5)]), &mut c).unwrap_err();
    assert!(matches!(&err, Error::Io { path, .. } if path == Path::new("fail/1.st")), "{err:?}");
}

#[test]
fn learning_rate_scheduler_per_epoch() {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 4, 1);
    let mut sched = LearningRateScheduler::new(|epoch, lr| if epoch < 2 { lr } else { lr * 0.5 });
    sched.on_train_begin(&mut c).unwrap();
    let mut seen = Vec::new();
    for epoch in 0..4 {
        sched.on_epoch_begin(epoch, &mut c).unwrap();
        seen.push(c.learning_rate);
        // Batches leave the rate alone in per-epoch mode.
        sched.on_batch_begin(0, &mut c).unwrap();
        sched.on_batch_end(0, &logs(&[("loss", 1.0)]), &mut c).unwrap();
    }
    assert_eq!(seen, [1.0, 1.0, 0.5, 0.25]);
}

#[test]
fn learning_rate_scheduler_per_batch_calls_once_per_step() {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 2, 3);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let mut sched = LearningRateScheduler::per_batch(move |step, _lr| {
        counter.fetch_add(1, Ordering::Relaxed);
        0.1 * (step + 1) as f32
    });
    sched.on_train_begin(&mut c).unwrap();
    // The rate each step runs with is the one in the context when the step starts.
    let mut used = Vec::new();
    for epoch in 0..2 {
        sched.on_epoch_begin(epoch, &mut c).unwrap();
        for batch in 0..3 {
            sched.on_batch_begin(batch, &mut c).unwrap();
            used.push(c.learning_rate);
            sched.on_batch_end(batch, &Logs::new(), &mut c).unwrap();
        }
        sched.on_epoch_end(epoch, &Logs::new(), &mut c).unwrap();
    }
    let want: Vec<f32> = (1..=6).map(|s| 0.1 * s as f32).collect();
    assert_eq!(used, want);
    assert_eq!(calls.load(Ordering::Relaxed), 6);
}

#[test]
fn learning_rate_scheduler_rejects_bad_rates() {
    let saver = FakeSaver::default();
    for bad in [f32::NAN, -1.0, f32::INFINITY] {
        let mut sched = LearningRateScheduler::new(move |_, _| bad);
        let msg = config_message(sched.on_epoch_begin(4, &mut ctx(&saver, 5, 1)).unwrap_err());
        assert!(msg.contains(&format!("returned {bad} at epoch 4")), "{msg}");
    }
}

#[test]
fn reduce_lr_on_plateau_table() {
    struct Case {
        name: &'static str,
        plateau: ReduceLROnPlateau,
        series: &'static [f64],
        lrs: &'static [f32],
    }
    let flat = &[1.0; 6];
    let cases = [
        Case {
            name: "factor after patience",
            plateau: ReduceLROnPlateau::new("val_loss").factor(0.5).patience(2),
            series: &[1.0; 5],
            lrs: &[1.0, 1.0, 0.5, 0.5, 0.25],
        },
        Case {
            name: "default factor 0.1",
            plateau: ReduceLROnPlateau::new("val_loss").patience(1),
            series: &[1.0, 1.0],
            lrs: &[1.0, 0.1],
        },
        Case {
            name: "cooldown",
            plateau: ReduceLROnPlateau::new("val_loss").factor(0.5).patience(1).cooldown(2),
            series: flat,
            lrs: &[1.0, 0.5, 0.5, 0.25, 0.25, 0.125],
        },
        Case {
            name: "min_lr floor",
            plateau: ReduceLROnPlateau::new("val_loss").factor(0.5).patience(1).min_lr(0.3),
            series: &[1.0; 4],
            lrs: &[1.0, 0.5, 0.3, 0.3],
        },
        Case {
            name: "below min_delta is a stall",
            plateau: ReduceLROnPlateau::new("val_loss").patience(1),
            series: &[1.0, 0.99995],
            lrs: &[1.0, 0.1],
        },
        Case {
            name: "improvements reset the wait",
            plateau: ReduceLROnPlateau::new("val_loss").factor(0.5).patience(2),
            series: &[1.0, 1.0, 0.9, 0.9, 0.8],
            lrs: &[1.0; 5],
        },
        Case {
            name: "auto mode maximises accuracy",
            plateau: ReduceLROnPlateau::new("val_accuracy").factor(0.5).patience(1),
            series: &[0.5, 0.6, 0.7, 0.6],
            lrs: &[1.0, 1.0, 1.0, 0.5],
        },
    ];
    let saver = FakeSaver::default();
    for mut case in cases {
        let key = if case.name.contains("accuracy") { "val_accuracy" } else { "val_loss" };
        let mut c = ctx(&saver, case.series.len(), 1);
        case.plateau.on_train_begin(&mut c).unwrap();
        let mut lrs = Vec::new();
        for (epoch, &v) in case.series.iter().enumerate() {
            case.plateau.on_epoch_end(epoch, &logs(&[(key, v)]), &mut c).unwrap();
            lrs.push(c.learning_rate);
        }
        for (got, want) in lrs.iter().zip(case.lrs) {
            assert!((got - want).abs() <= 1e-6 * want, "{}: got {lrs:?}, want {:?}", case.name, case.lrs);
        }
        assert_eq!(lrs.len(), case.lrs.len(), "{}", case.name);
    }
}

#[test]
fn reduce_lr_on_plateau_errors() {
    let saver = FakeSaver::default();
    let msg =
        config_message(ReduceLROnPlateau::default().factor(1.0).on_train_begin(&mut ctx(&saver, 1, 1)).unwrap_err());
    assert!(msg.contains("factor must be in [0, 1), got 1"), "{msg}");
    let mut plateau = ReduceLROnPlateau::default();
    let mut c = ctx(&saver, 1, 1);
    plateau.on_train_begin(&mut c).unwrap();
    let msg = config_message(plateau.on_epoch_end(0, &logs(&[("loss", 1.0)]), &mut c).unwrap_err());
    assert!(msg.contains("ReduceLROnPlateau") && msg.contains("available: [loss]"), "{msg}");
}

#[test]
fn csv_logger_writes_exact_content_and_flushes_each_epoch() {
    let path = temp_dir("csv-exact").join("log.csv");
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 2, 1);
    let mut csv = CsvLogger::new(&path);
    csv.on_train_begin(&mut c).unwrap();
    csv.on_epoch_end(0, &logs(&[("loss", 0.5), ("accuracy", 0.75), ("val_loss", 0.625)]), &mut c).unwrap();
    // Flushed: readable before training ends.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "epoch,accuracy,loss,val_loss\n0,0.75,0.5,0.625\n");
    // A missing key is NA; a new key is not added.
    csv.on_epoch_end(1, &logs(&[("loss", 0.25), ("accuracy", 0.875), ("extra", 1.0)]), &mut c).unwrap();
    csv.on_train_end(&Logs::new(), &mut c).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "epoch,accuracy,loss,val_loss\n0,0.75,0.5,0.625\n1,0.875,0.25,NA\n"
    );

    // Without append a new run overwrites the file.
    let mut csv = CsvLogger::new(&path).separator(';');
    csv.on_train_begin(&mut c).unwrap();
    csv.on_epoch_end(0, &logs(&[("loss", 2.0)]), &mut c).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "epoch;loss\n0;2\n");
}

#[test]
fn csv_logger_append() {
    let dir = temp_dir("csv-append");
    let path = dir.join("log.csv");
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 2, 1);
    for epoch in 0..2 {
        // A new logger per run, as after a restart with --resume.
        let mut csv = CsvLogger::new(&path).append(true);
        csv.on_train_begin(&mut c).unwrap();
        csv.on_epoch_end(epoch, &logs(&[("loss", 1.0 / (epoch + 1) as f64)]), &mut c).unwrap();
        csv.on_train_end(&Logs::new(), &mut c).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "epoch,loss\n0,1\n1,0.5\n");

    // An existing empty file still gets its header.
    let empty = dir.join("empty.csv");
    std::fs::File::create(&empty).unwrap();
    let mut csv = CsvLogger::new(&empty).append(true);
    csv.on_train_begin(&mut c).unwrap();
    csv.on_epoch_end(0, &logs(&[("a;b", 1.5)]), &mut c).unwrap();
    assert_eq!(std::fs::read_to_string(&empty).unwrap(), "epoch,a;b\n0,1.5\n");
    // A key containing the separator is quoted.
    let quoted = dir.join("quoted.csv");
    let mut csv = CsvLogger::new(&quoted).separator(';');
    csv.on_train_begin(&mut c).unwrap();
    csv.on_epoch_end(0, &logs(&[("a;b", 1.5)]), &mut c).unwrap();
    assert_eq!(std::fs::read_to_string(&quoted).unwrap(), "epoch;\"a;b\"\n0;1.5\n");
}

#[test]
fn csv_logger_unwritable_path_fails_at_train_begin() {
    let path = temp_dir("csv-missing").join("no-such-dir").join("log.csv");
    let saver = FakeSaver::default();
    let err = CsvLogger::new(&path).on_train_begin(&mut ctx(&saver, 1, 1)).unwrap_err();
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    assert!(matches!(&err, Error::Io { path: p, .. } if *p == path), "{err:?}");
}

#[test]
fn terminate_on_nan_table() {
    let cases: [(&str, &[f64], Option<usize>); 5] = [
        ("finite losses run on", &[0.5, 0.4, 0.3], None),
        ("NaN stops at its batch", &[0.5, f64::NAN, 0.3], Some(1)),
        ("+inf stops", &[f64::INFINITY], Some(0)),
        ("-inf stops", &[0.5, 0.4, f64::NEG_INFINITY], Some(2)),
        ("no loss key is ignored", &[], None),
    ];
    let saver = FakeSaver::default();
    for (name, losses, stop_at) in cases {
        let mut term = TerminateOnNaN::new();
        let mut c = ctx(&saver, 2, losses.len().max(1));
        let ran = fit(&mut [&mut term], &mut c, |_, b| match losses.get(b) {
            Some(&loss) => logs(&[("loss", loss)]),
            None => logs(&[("accuracy", f64::NAN)]),
        })
        .unwrap();
        assert_eq!(term.terminated_at(), stop_at.map(|b| (0, b)), "{name}");
        assert_eq!(c.stop_training, stop_at.is_some(), "{name}");
        assert_eq!(ran, stop_at.map_or(2 * c.steps_per_epoch, |b| b + 1), "{name}");
    }
}

#[test]
fn history_records_every_epoch() {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 3, 1);
    let mut history = History::new();
    history.on_train_begin(&mut c).unwrap();
    history.on_epoch_end(0, &logs(&[("loss", 1.0), ("accuracy", 0.5)]), &mut c).unwrap();
    history.on_epoch_end(1, &logs(&[("loss", 0.5), ("accuracy", 0.75), ("val_loss", 0.625)]), &mut c).unwrap();
    history.on_epoch_end(2, &logs(&[("loss", 0.25), ("accuracy", 0.875)]), &mut c).unwrap();
    assert_eq!(history.history()["loss"], [1.0, 0.5, 0.25]);
    assert_eq!(history.get("accuracy"), Some(&[0.5, 0.75, 0.875][..]));
    assert_eq!(history.get("val_loss"), Some(&[0.625][..]));
    assert_eq!(history.get("val_accuracy"), None);
    assert_eq!(history.epochs(), [0, 1, 2]);
    let json = serde_json::to_value(&history).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "epoch": [0, 1, 2],
            "history": {"accuracy": [0.5, 0.75, 0.875], "loss": [1.0, 0.5, 0.25], "val_loss": [0.625]}
        })
    );
}

/// A `Write` the test can read back after handing it to the progress bar.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn progress_output(progress: ProgressBar, out: &Shared, shares: (f64, f64), rate: f64) -> String {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 2, 3);
    let mut progress = progress;
    progress.on_train_begin(&mut c).unwrap();
    for epoch in 0..2 {
        progress.on_epoch_begin(epoch, &mut c).unwrap();
        for b in 0..3 {
            let batch = logs(&[
                ("loss", 0.5),
                ("accuracy", 0.75),
                ("batch_size", 64.0),
                ("images_per_sec", rate),
                ("input_wait", shares.0),
                ("compute", 1.0 - shares.0 - shares.1),
                ("exchange", shares.1),
            ]);
            progress.on_batch_end(b, &batch, &mut c).unwrap();
        }
        let epoch_logs = logs(&[("loss", 0.5), ("accuracy", 0.75), ("val_loss", 0.0001), ("val_accuracy", 0.7)]);
        progress.on_epoch_end(epoch, &epoch_logs, &mut c).unwrap();
    }
    progress.on_train_end(&Logs::new(), &mut c).unwrap();
    out.text()
}

#[test]
fn progress_bar_plain_lines() {
    let out = Shared::default();
    let text = progress_output(ProgressBar::new().to_writer(out.clone()), &out, (0.25, 0.1), 4213.4);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let want =
        "Epoch 1/2 3/3 loss 0.5000 accuracy 0.7500 val_loss 1.0000e-4 val_accuracy 0.7000 4,213 img/s input-bound ";
    assert!(lines[0].starts_with(want), "{}", lines[0]);
    assert!(lines[1].starts_with("Epoch 2/2 3/3 "), "{}", lines[1]);

    let out = Shared::default();
    let text = progress_output(ProgressBar::new().verbose(2).to_writer(out.clone()), &out, (0.1, 0.35), 1234567.0);
    assert!(text.contains(" 1,234,567 img/s exchange-bound ") && !text.contains("input-bound"), "{text}");

    let out = Shared::default();
    assert_eq!(progress_output(ProgressBar::new().verbose(0).to_writer(out.clone()), &out, (0.5, 0.5), 1.0), "");
}

#[test]
fn progress_bar_on_stderr_does_not_panic() {
    // Under `cargo test` stderr is usually not a terminal, which exercises the plain path;
    // on a terminal this draws real bars.
    let out = Shared::default();
    progress_output(ProgressBar::new(), &out, (0.0, 0.0), 100.0);
    let saver = FakeSaver::default();
    let msg = config_message(ProgressBar::new().verbose(3).on_train_begin(&mut ctx(&saver, 1, 1)).unwrap_err());
    assert!(msg.contains("got 3"), "{msg}");
}

/// A user callback: stops once the training loss falls below a threshold, counting hooks.
#[derive(Default)]
struct StopBelow {
    threshold: f64,
    calls: Vec<String>,
}

impl Callback for StopBelow {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        self.calls.push("train_begin".into());
        Ok(())
    }
    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        self.calls.push(format!("epoch_end {epoch}"));
        if logs["loss"] < self.threshold {
            ctx.stop_training = true;
        }
        Ok(())
    }
}

#[test]
fn custom_callback_alongside_builtin_ones() {
    let saver = FakeSaver::default();
    let mut c = ctx(&saver, 10, 2);
    let mut stop = StopBelow { threshold: 0.3, ..Default::default() };
    let mut history = History::new();
    let mut ckpt = ModelCheckpoint::new("w{epoch}.st");
    let ran =
        fit(&mut [&mut stop, &mut history, &mut ckpt], &mut c, |epoch, _| logs(&[("loss", 1.0 / (epoch + 1) as f64)]))
            .unwrap();
    // Losses 1, 0.5, 0.333, 0.25: stops after the fourth epoch.
    assert_eq!(ran, 8);
    assert_eq!(stop.calls, ["train_begin", "epoch_end 0", "epoch_end 1", "epoch_end 2", "epoch_end 3"]);
    assert_eq!(history.epochs(), [0, 1, 2, 3]);
    assert_eq!(saver.saved(), ["w1.st", "w2.st", "w3.st", "w4.st"]);
}
