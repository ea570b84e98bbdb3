//! `CONVOY_LOG=error|warn|info|debug|trace`: the log records of wgpu and its drivers on
//! stderr. Off by default; a driver's refusal that wgpu reports only as "device lost"
//! (NVIDIA's GL, issue 24) names its real cause here.

use log::{Level, Log, Metadata, Record};

/// The environment variable that sets the level.
pub const LOG_ENV: &str = "CONVOY_LOG";

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }
    fn log(&self, r: &Record) {
        eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
    }
    fn flush(&self) {}
}

/// Installs the stderr logger at the level `CONVOY_LOG` names; an unknown level is an error
/// naming it.
pub fn init() -> convoy::Result<()> {
    let Ok(v) = std::env::var(LOG_ENV) else { return Ok(()) };
    let level = match v.trim() {
        "" | "off" => return Ok(()),
        s => s.parse::<Level>().map_err(|_| convoy::Error::Config(format!("{LOG_ENV}=`{s}`: expected off, error, warn, info, debug or trace")))?,
    };
    // Another logger already installed (a second call) keeps its place.
    if log::set_logger(&Stderr).is_ok() {
        log::set_max_level(level.to_level_filter());
    }
    Ok(())
}
