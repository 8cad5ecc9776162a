//! rocky's kernel compiler: a small tile-parameterized IR, templates that instantiate it for a
//! (workload, schedule) pair, SPIR-V codegen with rspirv, and a CPU reference for every template.
//! No Vulkan and no I/O here, so everything can be tested alone.

pub mod codegen;
pub mod ir;
pub mod kernel;
