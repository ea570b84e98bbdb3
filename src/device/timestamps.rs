//! GPU timestamps around compute passes: per-kernel timings for `convoy bench --profile`
//! and GPU spans in `--trace`. Only on adapters with `TIMESTAMP_QUERY`.

use super::staging::Readback;
use super::Device;
use crate::{Error, Result};

/// A query set of `2 * passes` timestamps (begin and end of each pass), resolved into a
/// buffer and read back through a `Readback`.
pub struct Timestamps {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: Readback,
    passes: u32,
    period_ns: f64,
}

impl Timestamps {
    /// Room for `passes` timed passes, or `None` when the adapter cannot time them.
    pub fn new(device: &Device, passes: u32) -> Option<Timestamps> {
        if !device.features().contains(wgpu::Features::TIMESTAMP_QUERY) || passes == 0 {
            return None;
        }
        let passes = passes.min(wgpu::QUERY_SET_MAX_QUERIES / 2);
        let bytes = 2 * passes as u64 * wgpu::QUERY_SIZE as u64;
        let set = device.wgpu().create_query_set(&wgpu::QuerySetDescriptor { label: Some("timestamps"), ty: wgpu::QueryType::Timestamp, count: 2 * passes });
        let resolved = device.wgpu().create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps resolved"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Some(Timestamps { set, resolved, readback: Readback::new(device.wgpu(), bytes), passes, period_ns: device.queue().get_timestamp_period() as f64 })
    }

    /// How many passes fit.
    pub fn capacity(&self) -> u32 {
        self.passes
    }

    /// The writes that time pass `i` (begin and end).
    pub fn pass(&self, i: u32) -> wgpu::ComputePassTimestampWrites<'_> {
        assert!(i < self.passes, "timestamp pass {i} beyond the {} reserved", self.passes);
        wgpu::ComputePassTimestampWrites { query_set: &self.set, beginning_of_pass_write_index: Some(2 * i), end_of_pass_write_index: Some(2 * i + 1) }
    }

    /// A compute pass on `encoder` timed as pass `i`, or untimed without `timestamps`.
    pub fn begin<'e>(timestamps: Option<&Timestamps>, i: u32, encoder: &'e mut wgpu::CommandEncoder) -> wgpu::ComputePass<'e> {
        let writes = timestamps.map(|t| t.pass(i));
        encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: writes })
    }

    /// Encodes the resolve of the first `used` passes and their copy to the readback; call
    /// `submitted` with the submission of `encoder`.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder, used: u32) {
        let used = used.min(self.passes);
        if used == 0 {
            return;
        }
        encoder.resolve_query_set(&self.set, 0..2 * used, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback.buffer, 0, 2 * used as u64 * wgpu::QUERY_SIZE as u64);
    }

    /// Requests the readback after `submission`, the one whose encoder [`resolve`](Self::resolve)
    /// wrote to.
    pub fn submitted(&mut self, submission: wgpu::SubmissionIndex) {
        self.readback.request(submission);
    }

    /// Whether resolved timestamps were requested and not yet read.
    pub fn is_pending(&self) -> bool {
        self.readback.is_pending()
    }

    /// Waits for the resolved timestamps and returns each pass's `(begin, end)` in
    /// nanoseconds of the GPU's clock.
    pub fn read(&mut self, device: &Device, used: u32) -> Result<Vec<(f64, f64)>> {
        let used = used.min(self.passes) as usize;
        let mut bytes = Vec::new();
        self.readback.take(device.wgpu(), 2 * used * wgpu::QUERY_SIZE as usize, &mut bytes).map_err(|e| Error::Gpu(format!("timestamps: {e}")))?;
        let ticks: Vec<f64> = bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as f64 * self.period_ns).collect();
        Ok(ticks.chunks_exact(2).map(|p| (p[0], p[1])).collect())
    }

    /// The GPU clock (ns) now, for aligning GPU spans with host time: one empty timed pass,
    /// waited for.
    pub fn now_ns(&mut self, device: &Device) -> Result<f64> {
        let mut enc = device.wgpu().create_command_encoder(&Default::default());
        drop(Timestamps::begin(Some(self), 0, &mut enc));
        self.resolve(&mut enc, 1);
        let submission = device.queue().submit([enc.finish()]);
        self.submitted(submission);
        Ok(self.read(device, 1)?[0].1)
    }
}
