//! Kernel tests: each kernel against a plain-Rust f64 reference on random inputs of awkward
//! shapes, and every WGSL file through naga.
mod common;
mod elementwise;
mod optimizer;
mod shaders;
