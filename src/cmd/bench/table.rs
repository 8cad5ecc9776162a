//! The rows of `rocky bench` and their three renderings: an aligned text table (default),
//! llama-bench's markdown table (`--md`) and JSON (`--json`). Pure formatting, so the snapshot
//! tests pin it down without a GPU.

use crate::units::{human_bytes, human_count};
use serde::Serialize;

/// One row: a backend at one ubatch and prompt length, over `samples_s` repetitions.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// `qwen2 494M Q4_K`: architecture, parameters, main weight type.
    pub model: String,
    pub model_size_bytes: u64,
    pub n_params: u64,
    /// `Vulkan tuned`, `Vulkan default`, `CPU reference`.
    pub backend: String,
    pub device: String,
    /// `None` for the CPU reference (it runs the whole prompt at once).
    pub n_ubatch: Option<usize>,
    pub n_prompt: usize,
    /// GEMM nodes that ran a tuned schedule, of all GEMM nodes (GPU rows).
    pub tuned_gemms: Option<(usize, usize)>,
    /// Seconds of each repetition.
    pub samples_s: Vec<f64>,
    /// Bytes of device memory rocky's buffers take for this row (GPU rows): weights,
    /// activations at this ubatch, the KV cache for the longest prompt, ids and logits.
    pub device_bytes: Option<u64>,
    /// Whether the GPU has timestamps (GPU rows): without them nothing on the device side can
    /// cross-check the host's wall clock, and the row is marked.
    pub device_timestamps: Option<bool>,
    /// The KV cache's types (llama-bench's `type_k` and `type_v`: f32, f16 or q8_0).
    pub type_k: String,
    pub type_v: String,
}

impl BenchRow {
    /// Tokens per second of each repetition.
    pub fn samples_ts(&self) -> Vec<f64> {
        self.samples_s
            .iter()
            .map(|s| self.n_prompt as f64 / s)
            .collect()
    }

    /// Mean and sample standard deviation of the tokens per second, as llama-bench reports.
    pub fn ts_mean_stddev(&self) -> (f64, f64) {
        let ts = self.samples_ts();
        let n = ts.len() as f64;
        let mean = ts.iter().sum::<f64>() / n;
        let var = if ts.len() > 1 {
            ts.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        (mean, var.sqrt())
    }

    /// A GPU row measured on a device without timestamps.
    pub fn marked(&self) -> bool {
        self.device_timestamps == Some(false)
    }

    pub fn test(&self) -> String {
        format!("pp{}", self.n_prompt)
    }

    fn cells(&self, cache_types: bool) -> Vec<String> {
        let (mean, sd) = self.ts_mean_stddev();
        let mut cells = vec![
            self.model.clone(),
            human_bytes(self.model_size_bytes),
            human_count(self.n_params),
            self.backend.clone(),
            self.device.clone(),
            self.n_ubatch.map_or("-".into(), |u| u.to_string()),
        ];
        if cache_types {
            cells.extend([self.type_k.clone(), self.type_v.clone()]);
        }
        cells.extend([
            self.device_bytes.map_or("-".into(), human_bytes),
            self.test(),
            format!(
                "{mean:.2} ± {sd:.2}{}",
                if self.marked() { " *" } else { "" }
            ),
        ]);
        cells
    }
}

/// The header and alignment (numbers right-aligned, words left-aligned, as llama-bench
/// does) of the columns; `type_k` and `type_v` only where a row's cache is not f16, as
/// llama-bench shows them only when not at their default.
fn columns(cache_types: bool) -> Vec<(&'static str, bool)> {
    let mut cols = vec![
        ("model", false),
        ("size", true),
        ("params", true),
        ("backend", false),
        ("device", false),
        ("ubatch", true),
    ];
    if cache_types {
        cols.extend([("type_k", false), ("type_v", false)]);
    }
    cols.extend([("memory", true), ("test", true), ("t/s", true)]);
    cols
}

/// Whether any row's cache is not llama.cpp's default f16.
fn shows_cache_types(rows: &[BenchRow]) -> bool {
    rows.iter().any(|r| r.type_k != "f16" || r.type_v != "f16")
}

/// Below a table with marked rows: what the mark means.
const MARK_NOTE: &str = "* device without GPU timestamps: host wall clock of whole prefills \
(uploads, submits and waits included), nothing on the GPU side to cross-check it\n";

fn footnote(rows: &[BenchRow]) -> &'static str {
    if rows.iter().any(BenchRow::marked) {
        MARK_NOTE
    } else {
        ""
    }
}

/// llama-bench's markdown table.
pub fn markdown(rows: &[BenchRow]) -> String {
    let types = shows_cache_types(rows);
    let cols = columns(types);
    let header: Vec<&str> = cols.iter().map(|c| c.0).collect();
    let mut out = format!("| {} |\n", header.join(" | "));
    let rule: Vec<&str> = cols
        .iter()
        .map(|&(_, r)| if r { "---:" } else { "---" })
        .collect();
    out += &format!("| {} |\n", rule.join(" | "));
    for r in rows {
        out += &format!("| {} |\n", r.cells(types).join(" | "));
    }
    if !footnote(rows).is_empty() {
        out += "\n";
        out += footnote(rows);
    }
    out
}

/// Columns padded to their widest cell.
pub fn text(rows: &[BenchRow]) -> String {
    let types = shows_cache_types(rows);
    let cols = columns(types);
    let cells: Vec<Vec<String>> = rows.iter().map(|r| r.cells(types)).collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .chain([cols[i].0.len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..cols.len()).map(width).collect();
    let line = |c: &[String]| {
        let parts: Vec<String> = (0..cols.len())
            .map(|i| {
                let pad = widths[i] - c[i].chars().count();
                if cols[i].1 {
                    format!("{}{}", " ".repeat(pad), c[i])
                } else {
                    format!("{}{}", c[i], " ".repeat(pad))
                }
            })
            .collect();
        format!("{}\n", parts.join("  ").trim_end())
    };
    let header: Vec<String> = cols.iter().map(|h| h.0.to_string()).collect();
    let mut out = line(&header);
    for c in &cells {
        out += &line(c);
    }
    out + footnote(rows)
}

/// The rows as JSON, with the per-repetition figures and their summary.
pub fn json(rows: &[BenchRow]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let (mean, sd) = r.ts_mean_stddev();
            let mut v = serde_json::to_value(r).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("test".into(), r.test().into());
                o.insert("samples_ts".into(), r.samples_ts().into());
                o.insert("avg_ts".into(), mean.into());
                o.insert("stddev_ts".into(), sd.into());
                o.insert("timing".into(), "host wall clock".into());
            }
            v
        })
        .collect();
    serde_json::Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows with round timings, so every figure in the snapshots can be checked by hand:
    /// 512 tokens in 0.25 s and 0.5 s → 2048 and 1024 t/s, mean 1536, stddev 724.08.
    fn rows() -> Vec<BenchRow> {
        let base = BenchRow {
            model: "qwen2 494M Q4_K".into(),
            model_size_bytes: 491_400_032,
            n_params: 494_032_768,
            backend: "Vulkan tuned".into(),
            device: "NVIDIA H200".into(),
            n_ubatch: Some(512),
            n_prompt: 512,
            tuned_gemms: Some((169, 169)),
            samples_s: vec![0.25, 0.5],
            device_bytes: Some(1_234_567_890),
            device_timestamps: Some(true),
            type_k: "f16".into(),
            type_v: "f16".into(),
        };
        vec![
            base.clone(),
            BenchRow {
                backend: "Vulkan default".into(),
                tuned_gemms: Some((0, 169)),
                samples_s: vec![0.5, 0.5],
                ..base.clone()
            },
            BenchRow {
                backend: "CPU reference".into(),
                device: "CPU".into(),
                n_ubatch: None,
                tuned_gemms: None,
                samples_s: vec![16.0],
                device_bytes: None,
                device_timestamps: None,
                ..base
            },
        ]
    }

    #[test]
    fn rows_of_a_device_without_timestamps_are_marked_and_explained() {
        let mut r = rows();
        assert!(!text(&r).contains('*') && !markdown(&r).contains('*'));
        r[1].device_timestamps = Some(false);
        for table in [text(&r), markdown(&r)] {
            let marked: Vec<&str> = table.lines().filter(|l| l.contains(" *")).collect();
            assert_eq!(marked.len(), 1, "{table}");
            assert!(marked[0].contains("Vulkan default"), "{table}");
            assert!(table.contains("device without GPU timestamps"), "{table}");
        }
        assert_eq!(json(&r)[1]["device_timestamps"], false);
    }

    #[test]
    fn cache_type_columns_appear_where_a_row_is_not_f16() {
        let mut r = rows();
        assert!(!text(&r).contains("type_k") && !markdown(&r).contains("type_v"));
        r[0].type_k = "q8_0".into();
        r[0].type_v = "q8_0".into();
        let md = markdown(&r);
        let header = md.lines().next().unwrap();
        assert!(
            header.contains("| ubatch | type_k | type_v | memory |"),
            "{md}"
        );
        assert!(
            md.lines().nth(2).unwrap().contains("| q8_0 | q8_0 |"),
            "{md}"
        );
        assert!(md.lines().nth(3).unwrap().contains("| f16 | f16 |"), "{md}");
        let text = text(&r);
        assert!(
            text.lines().next().unwrap().contains("type_k  type_v"),
            "{text}"
        );
        assert_eq!(json(&r)[0]["type_k"], "q8_0");
    }

    #[test]
    fn statistics_match_the_closed_form() {
        let (mean, sd) = rows()[0].ts_mean_stddev();
        assert_eq!(mean, 1536.0);
        // Sample stddev of {2048, 1024}: |2048 - 1024| / sqrt(2).
        assert!((sd - 1024.0 / 2f64.sqrt()).abs() < 1e-9);
        assert_eq!(rows()[2].ts_mean_stddev(), (32.0, 0.0));
    }

    #[test]
    fn markdown_table_matches_the_snapshot() {
        assert_eq!(
            markdown(&rows()),
            include_str!("../../../tests/snapshots/bench-table.md")
        );
    }

    #[test]
    fn text_table_matches_the_snapshot() {
        assert_eq!(
            text(&rows()),
            include_str!("../../../tests/snapshots/bench-table.txt")
        );
    }

    #[test]
    fn json_rows_carry_samples_and_summary() {
        let v = json(&rows());
        let first = &v[0];
        assert_eq!(first["test"], "pp512");
        assert_eq!(first["samples_ts"], serde_json::json!([2048.0, 1024.0]));
        assert_eq!(first["avg_ts"], 1536.0);
        assert_eq!(v[2]["n_ubatch"], serde_json::Value::Null);
        assert_eq!(v[1]["tuned_gemms"], serde_json::json!([0, 169]));
    }
}
