//! Compute pipelines from SPIR-V words and a kernel's metadata.
//!
//! The compiler/runtime contract (`rocky_compiler::kernel`): storage buffers in descriptor set
//! 0 at the listed bindings, one push-constant block at offset 0, entry point `main`.

use crate::device::{Context, Shared};
use crate::error::{OomKind, Result, RuntimeError};
use crate::pipeline_cache::PipelineCache;
use ash::vk;
use rocky_compiler::kernel::{CompiledKernel, KernelMeta, KernelSource};
use std::collections::BTreeSet;
use std::sync::Arc;

const SPIRV_MAGIC: u32 = 0x0723_0203;

pub struct ComputePipeline {
    shared: Arc<Shared>,
    pub(crate) raw: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    meta: KernelMeta,
    /// What the kernel was compiled from, for its counter-ordered twin.
    source: Option<Arc<KernelSource>>,
    /// The counter-ordered twin ([`ComputePipeline::chained_twin`]), built on first use.
    chained: std::sync::OnceLock<Box<ComputePipeline>>,
}

impl std::fmt::Debug for ComputePipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputePipeline")
            .field("kernel", &self.meta.name)
            .finish()
    }
}

impl ComputePipeline {
    pub fn from_kernel(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
    ) -> Result<ComputePipeline> {
        let mut p = ComputePipeline::new(ctx, cache, &kernel.spirv, &kernel.meta)?;
        p.source = kernel.source.clone();
        Ok(p)
    }

    /// This kernel ordered by counters instead of pipeline barriers
    /// (`rocky_compiler::ir::chain`): built on first use and kept with this pipeline; `None`
    /// where the pipeline was not built from a template's module.
    pub fn chained_twin(
        &self,
        ctx: &Context,
        cache: Option<&PipelineCache>,
    ) -> Result<Option<&ComputePipeline>> {
        if let Some(twin) = self.chained.get() {
            return Ok(Some(twin));
        }
        let Some(source) = &self.source else {
            return Ok(None);
        };
        let kernel =
            source
                .chained(chain_model_data())
                .map_err(|r| RuntimeError::InvalidDispatch {
                    kernel: self.meta.name.clone(),
                    reason: format!("its counter-ordered form was refused: {r}"),
                })?;
        let twin = ComputePipeline::from_kernel(ctx, cache, &kernel)?;
        // Two threads building at once: the loser's twin is dropped, the winner's kept.
        let _ = self.chained.set(Box::new(twin));
        Ok(self.chained.get().map(|b| &**b))
    }

    /// [`ComputePipeline::from_kernel`], created with the driver's statistics captured and
    /// read back (`VK_KHR_pipeline_executable_properties`): `StatisticsUnsupported` where the
    /// device does not offer them ([`Context::has_pipeline_statistics`]).
    pub fn with_statistics(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
    ) -> Result<(ComputePipeline, crate::PipelineStatistics)> {
        if !ctx.has_pipeline_statistics() {
            return Err(RuntimeError::StatisticsUnsupported {
                device: ctx.info().name.clone(),
            });
        }
        let flags = vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR;
        let pipeline = ComputePipeline::build(ctx, cache, &kernel.spirv, &kernel.meta, flags)?;
        let stats = crate::pipeline_stats::read(ctx, pipeline.raw)?;
        Ok((pipeline, stats))
    }

    /// [`ComputePipeline::with_statistics`] where the device reports the driver's statistics
    /// ([`Context::has_pipeline_statistics`]), else [`ComputePipeline::from_kernel`] and `None`:
    /// what the tuner's GEMM and attention trials build, so every trial keeps them.
    pub fn from_kernel_keeping_statistics(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
    ) -> Result<(ComputePipeline, Option<crate::PipelineStatistics>)> {
        if ctx.has_pipeline_statistics() {
            let (p, stats) = ComputePipeline::with_statistics(ctx, cache, kernel)?;
            Ok((p, Some(stats)))
        } else {
            Ok((ComputePipeline::from_kernel(ctx, cache, kernel)?, None))
        }
    }

    /// Checks `meta` against the device (features, limits, SPIR-V version), then builds the
    /// descriptor set layout, pipeline layout and pipeline (through `cache` if given).
    pub fn new(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        spirv: &[u32],
        meta: &KernelMeta,
    ) -> Result<ComputePipeline> {
        ComputePipeline::build(ctx, cache, spirv, meta, vk::PipelineCreateFlags::empty())
    }

    fn build(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        spirv: &[u32],
        meta: &KernelMeta,
        flags: vk::PipelineCreateFlags,
    ) -> Result<ComputePipeline> {
        ctx.check_required(&meta.name, &meta.required)?;
        check_fits(ctx, spirv, meta)?;
        let shared = &ctx.shared;
        let device = &shared.device;

        let bindings: Vec<vk::DescriptorSetLayoutBinding> = meta
            .bindings
            .iter()
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b.binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let push_ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(meta.push_constant_bytes)];
        let push_ranges: &[vk::PushConstantRange] = if meta.push_constant_bytes > 0 {
            &push_ranges
        } else {
            &[]
        };

        // Partially built objects are destroyed by this guard if a later step fails.
        let mut pipeline = ComputePipeline {
            shared: shared.clone(),
            raw: vk::Pipeline::null(),
            layout: vk::PipelineLayout::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            meta: meta.clone(),
            source: None,
            chained: std::sync::OnceLock::new(),
        };
        let fail = |call: &'static str, r: vk::Result| match OomKind::of(r) {
            Some(kind) => RuntimeError::OutOfMemory {
                what: format!("creating the pipeline of kernel `{}` ({call})", meta.name),
                bytes: None,
                kind,
                hint: String::new(),
            },
            None => RuntimeError::vk(call, r),
        };
        // SAFETY: valid device; every create-info and what it points to outlives its call.
        unsafe {
            let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
            pipeline.set_layout = device
                .create_descriptor_set_layout(&set_info, None)
                .map_err(|r| fail("vkCreateDescriptorSetLayout", r))?;
            let set_layouts = [pipeline.set_layout];
            let layout_info = vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&set_layouts)
                .push_constant_ranges(push_ranges);
            pipeline.layout = device
                .create_pipeline_layout(&layout_info, None)
                .map_err(|r| fail("vkCreatePipelineLayout", r))?;

            let module_info = vk::ShaderModuleCreateInfo::default().code(spirv);
            let module = device
                .create_shader_module(&module_info, None)
                .map_err(|r| fail("vkCreateShaderModule", r))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let info = vk::ComputePipelineCreateInfo::default()
                .flags(flags)
                .stage(stage)
                .layout(pipeline.layout);
            let cache_raw = cache.map_or(vk::PipelineCache::null(), |c| c.raw);
            let created = device.create_compute_pipelines(cache_raw, &[info], None);
            // The module is only needed while the pipeline is created.
            device.destroy_shader_module(module, None);
            pipeline.raw = match created {
                Ok(p) => p[0],
                Err((_, r)) => {
                    let generic = OomKind::of(r).is_some() || r == vk::Result::ERROR_DEVICE_LOST;
                    return Err(if generic {
                        fail("vkCreateComputePipelines", r)
                    } else {
                        RuntimeError::PipelineCreation {
                            kernel: meta.name.clone(),
                            result: r,
                        }
                    });
                }
            };
        }
        Ok(pipeline)
    }

    pub fn meta(&self) -> &KernelMeta {
        &self.meta
    }
}

impl Drop for ComputePipeline {
    fn drop(&mut self) {
        // SAFETY: recorders borrow the pipelines they use and finish before these drop;
        // destroying null handles is a no-op.
        unsafe {
            let device = &self.shared.device;
            device.destroy_pipeline(self.raw, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// Refuses metadata the device cannot run, with the limit that is exceeded.
fn check_fits(ctx: &Context, spirv: &[u32], meta: &KernelMeta) -> Result<()> {
    let caps = ctx.caps();
    let refuse = |reason: String| {
        Err(RuntimeError::KernelExceedsLimits {
            kernel: meta.name.clone(),
            reason,
        })
    };
    if spirv.len() < 5 || spirv[0] != SPIRV_MAGIC {
        return refuse("the code is not a SPIR-V module (bad magic number or too short)".into());
    }
    let module_version = (
        ((spirv[1] >> 16) & 0xff) as u8,
        ((spirv[1] >> 8) & 0xff) as u8,
    );
    for (what, version) in [
        ("module", module_version),
        ("kernel metadata", meta.spirv_version),
    ] {
        if version > caps.max_spirv_version {
            return refuse(format!(
                "the {what} targets SPIR-V {}.{}, the device accepts up to {}.{}",
                version.0, version.1, caps.max_spirv_version.0, caps.max_spirv_version.1
            ));
        }
    }
    let wg = meta.workgroup_size;
    if wg.contains(&0) {
        return refuse(format!("workgroup size {wg:?} has a zero dimension"));
    }
    for axis in 0..3 {
        if wg[axis] > caps.max_workgroup_size[axis] {
            return refuse(format!(
                "workgroup size {wg:?} exceeds maxComputeWorkGroupSize {:?}",
                caps.max_workgroup_size
            ));
        }
    }
    let invocations = wg.iter().map(|&x| x as u64).product::<u64>();
    if invocations > caps.max_workgroup_invocations as u64 {
        return refuse(format!(
            "{invocations} invocations per workgroup exceed maxComputeWorkGroupInvocations {}",
            caps.max_workgroup_invocations
        ));
    }
    if meta.shared_bytes > caps.max_shared_bytes {
        return refuse(format!(
            "{} bytes of shared memory exceed maxComputeSharedMemorySize {}",
            meta.shared_bytes, caps.max_shared_bytes
        ));
    }
    if meta.push_constant_bytes % 4 != 0 || meta.push_constant_bytes > caps.max_push_constant_bytes
    {
        return refuse(format!(
            "push constants of {} bytes (must be a multiple of 4 and at most maxPushConstantsSize {})",
            meta.push_constant_bytes, caps.max_push_constant_bytes
        ));
    }
    if meta.bindings.len() as u64 > caps.max_storage_buffers_per_kernel as u64 {
        return refuse(format!(
            "{} storage buffers exceed maxPerStageDescriptorStorageBuffers {}",
            meta.bindings.len(),
            caps.max_storage_buffers_per_kernel
        ));
    }
    let mut seen = BTreeSet::new();
    for b in &meta.bindings {
        if !seen.insert(b.binding) {
            return refuse(format!("binding {} is listed twice", b.binding));
        }
    }
    Ok(())
}

/// DIAGNOSTIC ONLY: `ROCKY_DIAG_CHAIN_COHERENT_MODEL=1` makes the counter-ordered kernels
/// read the model's weights through coherent loads too (the first form of the chain), for an
/// A/B measurement of what coherence costs the weight stream. Unset: the weights keep the
/// cached path, which is correct because no dispatch writes them.
fn chain_model_data() -> rocky_compiler::ir::chain::ModelData {
    use rocky_compiler::ir::chain::ModelData;
    match std::env::var("ROCKY_DIAG_CHAIN_COHERENT_MODEL").as_deref() {
        Ok("1") => ModelData::Coherent,
        _ => ModelData::Cached,
    }
}
