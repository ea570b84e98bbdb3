//! Kernel tests: each kernel against a plain-Rust f64 reference on random inputs of awkward
//! shapes, and every WGSL file through naga.
mod activation;
mod augment;
mod cast;
mod batchnorm;
mod common;
mod concat;
mod conv2d;
mod conv_groups;
mod coop;
mod dense;
mod depthwise;
mod elementwise;
mod flip;
mod reduce;
mod image;
mod input_norm;
mod join;
mod layernorm;
mod loss;
mod nan;
mod optimizer;
mod paths;
mod pool;
mod shaders;
mod stats;
