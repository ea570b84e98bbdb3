//! GPU spans of a replica's steps for `--trace`, from timestamp queries around each pass
//! (forward and backward per gradient bucket, optimizer). Two query sets alternate by
//! step, so one is read back while the next step writes the other.
//!
//! The GPU clock is aligned with the trace's host clock once, when recording starts: an
//! empty timed pass is waited for and its end taken as "now" on the host, so GPU spans sit
//! a wake-up latency (tens of microseconds) early.

use crate::device::Timestamps;
use crate::{Device, Result};

pub struct GpuSpans {
    sets: [Timestamps; 2],
    names: [Vec<String>; 2],
    next: usize,
    /// Host trace microseconds minus GPU microseconds.
    offset_us: f64,
    replica: usize,
}

impl GpuSpans {
    /// `None` unless a trace is being recorded and the adapter has timestamp queries.
    pub fn new(device: &Device, passes: u32) -> Result<Option<GpuSpans>> {
        let (Some(mut a), Some(b)) = (Timestamps::new(device, passes), Timestamps::new(device, passes)) else { return Ok(None) };
        let gpu_ns = a.now_ns(device)?;
        let Some(host_us) = crate::trace::now_us() else { return Ok(None) };
        Ok(Some(GpuSpans { sets: [a, b], names: Default::default(), next: 0, offset_us: host_us - gpu_ns * 1e-3, replica: device.ordinal }))
    }

    /// Takes the query set for a new step, first writing out the spans it held.
    pub fn begin_step(&mut self, device: &Device) -> Result<usize> {
        let i = self.next;
        self.next ^= 1;
        self.emit(device, i)?;
        Ok(i)
    }

    /// Reserves the next timed pass of set `i` for a span called `name`.
    pub fn pass(&mut self, i: usize, name: String) -> Option<(&Timestamps, u32)> {
        let at = self.names[i].len() as u32;
        if at >= self.sets[i].capacity() {
            return None;
        }
        self.names[i].push(name);
        Some((&self.sets[i], at))
    }

    /// A compute pass on `encoder`, timed as the next span of set `i` when there is one.
    pub fn begin<'e>(spans: &mut Option<(&mut GpuSpans, usize)>, name: impl FnOnce() -> String, encoder: &'e mut wgpu::CommandEncoder) -> wgpu::ComputePass<'e> {
        match spans.as_mut().and_then(|(s, i)| s.pass(*i, name())) {
            Some((set, at)) => Timestamps::begin(Some(set), at, encoder),
            None => Timestamps::begin(None, 0, encoder),
        }
    }

    /// Encodes the resolve of set `i`'s passes; call `submitted` with `encoder`'s submission.
    pub fn resolve(&self, i: usize, encoder: &mut wgpu::CommandEncoder) {
        self.sets[i].resolve(encoder, self.names[i].len() as u32);
    }

    pub fn submitted(&mut self, i: usize, submission: wgpu::SubmissionIndex) {
        self.sets[i].submitted(submission);
    }

    /// Writes out the spans of set `i` if they were resolved, and clears it.
    fn emit(&mut self, device: &Device, i: usize) -> Result<()> {
        let names = std::mem::take(&mut self.names[i]);
        if !self.sets[i].is_pending() {
            return Ok(());
        }
        let times = self.sets[i].read(device, names.len() as u32)?;
        for (name, (t0, t1)) in names.into_iter().zip(times) {
            crate::trace::gpu_span(name, self.replica, t0 * 1e-3 + self.offset_us, (t1 - t0).max(0.0) * 1e-3);
        }
        Ok(())
    }
}
