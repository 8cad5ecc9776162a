//! Kernel snapshots ("process replay"): the SPIR-V the templates emit, compared with what was
//! accepted into `compiler/tests/snapshots/`, so a change that alters a kernel shows up in
//! review as a diff of that kernel and a refactor that should change nothing proves it.
//!
//! For each device profile (lavapipe, Mali on Mesa 25.0.7 and on 26.1, an NVIDIA-like desktop
//! GPU) and each workload below (every template, Qwen2.5-0.5B-like shapes):
//! - the default schedule's module in full, as disassembly (`<profile>/NN-<kind>.spvasm`);
//! - a fixed sample of the search space (every `len / SAMPLES`-th schedule, in the space's
//!   order) as one line each in `<profile>/sampled.txt`: the schedule, word count, an FNV-1a
//!   hash of the words, the SPIR-V version, capabilities and extensions.
//!
//! A mismatch fails with a readable diff. To accept intended changes:
//!
//! ```sh
//! ROCKY_ACCEPT_SNAPSHOTS=1 cargo test -p rocky-compiler --test kernel_snapshots
//! ```

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rocky_compiler::templates::attention::AttentionWorkload;
use rocky_compiler::templates::eltwise::EltwiseWorkload;
use rocky_compiler::templates::embedding::EmbeddingWorkload;
use rocky_compiler::templates::gemm::{ActType, Epilogue, GemmWorkload};
use rocky_compiler::templates::kv_cache::KvWriteWorkload;
use rocky_compiler::templates::rms_norm::RmsNormWorkload;
use rocky_compiler::templates::rope::RopeWorkload;
use rocky_compiler::{
    default_schedule, instantiate, search_space, DeviceCaps, Schedule, WeightFormat, WeightLayout,
    Workload,
};
use rspirv::binary::Disassemble;

/// Sampled schedules per workload and profile, besides the default.
const SAMPLES: usize = 6;

/// How many differing lines a failure prints per file.
const DIFF_LINES: usize = 40;

fn profiles() -> Vec<(&'static str, DeviceCaps)> {
    vec![
        ("lavapipe", DeviceCaps::lavapipe()),
        ("mali-25.0.7", common::mali_panvk25()),
        ("mali-26.1", DeviceCaps::mali_g610()),
        ("nvidia", DeviceCaps::desktop_all_features()),
    ]
}

fn gemm(m: u32, n: u32, k: u32, weight: WeightFormat) -> GemmWorkload {
    GemmWorkload {
        m,
        n,
        k,
        act: ActType::F32,
        weight,
        layout: WeightLayout::Gguf,
        bias: false,
        epilogue: Epilogue::None,
        rms_norm_eps_bits: None,
    }
}

/// Every template, in the shapes of a Qwen2.5-0.5B prefill at ubatch 64 and its decode step;
/// the GEMMs cover the formats and layouts the defaults treat differently, and both epilogues.
fn workloads() -> Vec<Workload> {
    use WeightFormat::*;
    vec![
        Workload::Gemm(GemmWorkload {
            bias: true,
            ..gemm(64, 896, 896, Q5_0)
        }),
        Workload::Gemm(gemm(64, 896, 4864, Q4K)),
        Workload::Gemm(GemmWorkload {
            layout: WeightLayout::Aligned,
            epilogue: Epilogue::SwiGlu,
            ..gemm(64, 4864, 896, Q8_0)
        }),
        Workload::Gemm(GemmWorkload {
            layout: WeightLayout::Aligned,
            epilogue: Epilogue::Residual,
            ..gemm(64, 896, 4864, Q6K)
        }),
        Workload::Gemm(gemm(512, 896, 896, F16)),
        Workload::Gemm(gemm(64, 896, 4864, IQ4XS)),
        Workload::Gemv(gemm(1, 896, 4864, Q4K)),
        Workload::Gemv(gemm(1, 151936, 896, Q8_0)),
        Workload::RmsNorm(RmsNormWorkload::new(64, 896, 1e-6)),
        Workload::RopeNeox(RopeWorkload::new(64, 14, 64, 1e6)),
        Workload::SwiGlu(EltwiseWorkload { m: 64, width: 4864 }),
        Workload::GeGlu(EltwiseWorkload { m: 64, width: 4864 }),
        Workload::Add(EltwiseWorkload { m: 64, width: 896 }),
        Workload::Scale(EltwiseWorkload { m: 64, width: 896 }),
        Workload::Embedding(EmbeddingWorkload::gguf(64, 896, Q8_0)),
        Workload::KvWrite(KvWriteWorkload {
            m: 64,
            kv_width: 128,
            ty: Default::default(),
            rotation: 0,
        }),
        Workload::Attention(AttentionWorkload {
            m: 64,
            n_heads: 14,
            n_kv_heads: 2,
            head_dim: 64,
            max_kv: 4096,
            window: 0,
            kv: Default::default(),
        }),
        Workload::Attention(AttentionWorkload {
            m: 1,
            n_heads: 14,
            n_kv_heads: 2,
            head_dim: 64,
            max_kv: 4096,
            window: 0,
            kv: Default::default(),
        }),
        // A decode step's: the 3B's gate/up GEMV with the SwiGLU epilogue, and the one-row
        // RoPE and KV write (whose args forms the replayed step runs).
        Workload::Gemv(GemmWorkload {
            epilogue: rocky_compiler::templates::gemm::Epilogue::SwiGlu,
            ..gemm(1, 11008, 2048, Q4K)
        }),
        Workload::RopeNeox(RopeWorkload::new(1, 14, 64, 1e6)),
        Workload::KvWrite(KvWriteWorkload {
            m: 1,
            kv_width: 128,
            ty: Default::default(),
            rotation: 0,
        }),
    ]
}

/// Every `len / SAMPLES`-th schedule of the space, so the sample spans it.
fn sample(space: Vec<Schedule>) -> Vec<Schedule> {
    let step = (space.len() / SAMPLES).max(1);
    space.into_iter().step_by(step).take(SAMPLES).collect()
}

fn fnv1a64(words: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in words.iter().flat_map(|w| w.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("workloads and schedules serialize")
}

/// What one module declares: SPIR-V version, capabilities and extensions.
struct Declared {
    version: (u8, u8),
    capabilities: Vec<String>,
    extensions: Vec<String>,
}

fn declared(module: &rspirv::dr::Module) -> Declared {
    let operand = |i: &rspirv::dr::Instruction| {
        i.operands
            .first()
            .map(|o| format!("{o}"))
            .unwrap_or_default()
    };
    let header = module.header.as_ref().expect("a SPIR-V header");
    let (major, minor) = header.version();
    Declared {
        version: (major, minor),
        capabilities: module.capabilities.iter().map(operand).collect(),
        extensions: module.extensions.iter().map(operand).collect(),
    }
}

fn load(words: &[u32]) -> rspirv::dr::Module {
    rspirv::dr::load_words(words).expect("the emitted SPIR-V parses")
}

/// One line of `sampled.txt`: the workload and schedule keys, then what the module is.
fn sampled_line(w: &Workload, s: &Schedule, caps: &DeviceCaps) -> String {
    match instantiate(w, s, caps) {
        Ok(k) => {
            let d = declared(&load(&k.spirv));
            format!(
                "{} {} => words {} fnv {:016x} spirv {}.{} caps [{}] ext [{}]",
                json(w),
                json(s),
                k.spirv.len(),
                fnv1a64(&k.spirv),
                d.version.0,
                d.version.1,
                d.capabilities.join(" "),
                d.extensions.join(" ")
            )
        }
        Err(e) => format!("{} {} => refused: {e}", json(w), json(s)),
    }
}

/// The default schedule's module as a readable file: what it is, then the disassembly; with
/// `args_form`, the form that reads its push constants from a buffer (`instantiate_with_args`,
/// what a replayed decode step runs).
fn default_snapshot(w: &Workload, caps: &DeviceCaps, args_form: bool) -> String {
    let s = default_schedule(w, caps);
    let k = if args_form {
        rocky_compiler::templates::instantiate_with_args(w, &s, caps)
    } else {
        instantiate(w, &s, caps)
    }
    .unwrap_or_else(|e| panic!("the default {} of {} is refused: {e}", json(&s), json(w)));
    let module = load(&k.spirv);
    let d = declared(&module);
    let mut out = String::new();
    writeln!(out, "; workload {}", json(w)).unwrap();
    writeln!(out, "; schedule {}", json(&s)).unwrap();
    writeln!(
        out,
        "; words {} fnv {:016x} spirv {}.{} shared bytes {} workgroup {:?}",
        k.spirv.len(),
        fnv1a64(&k.spirv),
        d.version.0,
        d.version.1,
        k.meta.shared_bytes,
        k.meta.workgroup_size
    )
    .unwrap();
    writeln!(out, "; capabilities {}", d.capabilities.join(" ")).unwrap();
    writeln!(out, "; extensions {}", d.extensions.join(" ")).unwrap();
    writeln!(out, "; required {:?}", k.meta.required).unwrap();
    out.push_str(&module.disassemble());
    out.push('\n');
    out
}

/// Every snapshot file (path relative to the snapshot folder → contents) the code makes now.
fn current_snapshots() -> BTreeMap<PathBuf, String> {
    let mut files = BTreeMap::new();
    for (pname, caps) in profiles() {
        let dir = PathBuf::from(pname);
        let mut sampled = String::new();
        for (i, w) in workloads().iter().enumerate() {
            let name = format!("{i:02}-{}.spvasm", w.kind());
            files.insert(dir.join(name), default_snapshot(w, &caps, false));
            // The position-reading kernels also run in their args form (decode replay).
            if rocky_compiler::templates::reads_position(w) {
                let name = format!("{i:02}-{}.args.spvasm", w.kind());
                files.insert(dir.join(name), default_snapshot(w, &caps, true));
            }
            for s in sample(search_space(w, &caps)) {
                sampled.push_str(&sampled_line(w, &s, &caps));
                sampled.push('\n');
            }
        }
        files.insert(dir.join("sampled.txt"), sampled);
    }
    files
}

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

/// Largest (snapshot lines × current lines) of a differing region aligned line by line (an
/// LCS table of u16 entries: 8 MiB); larger regions are printed whole.
const MAX_ALIGNED_CELLS: usize = 4 << 20;

/// The lines that differ, as `-` (snapshot) and `+` (now) in file order, with the common start
/// and end of the two texts left out, the rest aligned by a longest common subsequence where
/// it is small enough, and at most `DIFF_LINES` lines printed.
fn diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let lines = if a.len() * b.len() <= MAX_ALIGNED_CELLS && a.len().max(b.len()) < 65536 {
        aligned_changes(a, b, head)
    } else {
        let header = format!("@ line {} (too large to align)", head + 1);
        let removed = a.iter().map(|l| format!("- {l}"));
        let added = b.iter().map(|l| format!("+ {l}"));
        std::iter::once(header)
            .chain(removed)
            .chain(added)
            .collect()
    };
    let mut out = String::new();
    for l in lines.iter().take(DIFF_LINES) {
        out.push_str(l);
        out.push('\n');
    }
    if lines.len() > DIFF_LINES {
        writeln!(out, "  ... {} more lines", lines.len() - DIFF_LINES).unwrap();
    }
    out
}

/// The changes between `a` and `b` (the differing middles of two files, starting at line
/// `first` + 1): lines outside their longest common subsequence, each group headed by its line
/// number in the current file.
fn aligned_changes(a: &[&str], b: &[&str], first: usize) -> Vec<String> {
    // lcs[i][j]: length of the LCS of a[i..] and b[j..].
    let w = b.len() + 1;
    let mut lcs = vec![0u16; (a.len() + 1) * w];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i * w + j] = if a[i] == b[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j, mut out, mut in_hunk) = (0, 0, Vec::new(), false);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            (i, j, in_hunk) = (i + 1, j + 1, false);
            continue;
        }
        if !in_hunk {
            out.push(format!("@ line {}", first + j + 1));
            in_hunk = true;
        }
        if i < a.len() && (j == b.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
            out.push(format!("- {}", a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    out
}

fn accept(dir: &Path, files: &BTreeMap<PathBuf, String>) {
    let _ = std::fs::remove_dir_all(dir);
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    eprintln!(
        "accepted {} snapshot files into {}",
        files.len(),
        dir.display()
    );
}

/// The snapshot files on disk, relative to `dir`.
fn stored_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

#[test]
fn kernels_match_their_snapshots() {
    let dir = snapshot_dir();
    let now = current_snapshots();
    if std::env::var_os("ROCKY_ACCEPT_SNAPSHOTS").is_some() {
        accept(&dir, &now);
        return;
    }
    let mut failures = Vec::new();
    for (path, text) in &now {
        match std::fs::read_to_string(dir.join(path)) {
            Ok(stored) if &stored == text => {}
            Ok(stored) => failures.push(format!(
                "{} changed:\n{}",
                path.display(),
                diff(&stored, text)
            )),
            Err(_) => failures.push(format!("{} is not in the snapshots", path.display())),
        }
    }
    for path in stored_files(&dir) {
        if !now.contains_key(&path) {
            failures.push(format!(
                "{} is a snapshot the code no longer makes",
                path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} kernel snapshot files differ from compiler/tests/snapshots:\n\n{}\n\
         If the change is intended: ROCKY_ACCEPT_SNAPSHOTS=1 cargo test -p rocky-compiler \
         --test kernel_snapshots, and commit the snapshots with it.",
        failures.len(),
        now.len(),
        failures.join("\n")
    );
}

/// The snapshots can fail: a one-word change to a module is a different snapshot line.
#[test]
fn a_changed_module_changes_its_snapshot_line() {
    let caps = DeviceCaps::lavapipe();
    let w = &workloads()[1];
    let s = default_schedule(w, &caps);
    let k = instantiate(w, &s, &caps).unwrap();
    let mut changed = k.spirv.clone();
    let last = changed.len() - 1;
    changed[last] ^= 1;
    assert_ne!(fnv1a64(&k.spirv), fnv1a64(&changed));
    let d = diff("a\nb\nc\nd\ne\n", "a\nB\nc\nd\ne\nf\n");
    assert_eq!(d, "@ line 2\n- b\n+ B\n@ line 6\n+ f\n", "{d}");
}
