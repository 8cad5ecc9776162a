//! The per-op table of a profiled session: GPU time per (op, kernel), summed over layers.

use rocky_runtime::executor::{DispatchTime, ScheduleOrigin};

/// One (op, kernel) of the table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProfileRow {
    /// The node's op without its layer ("attn_q" for "blk.12.attn_q").
    pub op: String,
    /// The workload's dimensions ("m=512 n=2048 k=2048 …").
    pub shape: String,
    pub kernel: String,
    /// Whether the schedule came from the tuning database.
    pub tuned: bool,
    pub calls: usize,
    pub seconds: f64,
    /// Useful floating-point operations of all calls (for GFLOP/s).
    pub flops: f64,
    /// Share of the table's total GPU time.
    pub share: f64,
}

/// The rows of `times`, slowest first.
pub(crate) fn table(times: &[DispatchTime]) -> Vec<ProfileRow> {
    let mut rows: Vec<ProfileRow> = Vec::new();
    let total: f64 = times.iter().map(|t| t.seconds).sum();
    for t in times {
        let op = op_name(&t.label);
        let (workload, origin) = (t.workload, t.origin);
        match rows.iter_mut().find(|r| r.op == op && r.kernel == t.kernel) {
            Some(r) => {
                r.calls += 1;
                r.seconds += t.seconds;
                r.flops += workload.flops() as f64;
            }
            None => rows.push(ProfileRow {
                op,
                shape: workload_shape(&workload),
                kernel: t.kernel.clone(),
                tuned: origin == ScheduleOrigin::Tuned,
                calls: 1,
                seconds: t.seconds,
                flops: workload.flops() as f64,
                share: 0.0,
            }),
        }
    }
    for r in &mut rows {
        r.share = if total > 0.0 { r.seconds / total } else { 0.0 };
    }
    rows.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    rows
}

/// "blk.12.attn_q" → "attn_q": ops are summed over layers.
fn op_name(label: &str) -> String {
    match label.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, op)| op).to_string(),
        None => label.to_string(),
    }
}

/// The workload's fields as "k=v" pairs (its JSON without the variant name).
fn workload_shape(w: &rocky_compiler::Workload) -> String {
    serde_json::to_value(w)
        .ok()
        .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
        .map(|v| {
            v.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default()
        })
        .unwrap_or_default()
        .replace('"', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_are_named_without_their_layer() {
        assert_eq!(op_name("blk.12.attn_q"), "attn_q");
        assert_eq!(op_name("output"), "output");
        assert_eq!(op_name("blk.3"), "3");
    }
}
