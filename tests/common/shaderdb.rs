//! Mesa's `BIFROST_MESA_DEBUG=shaderdb` lines (panvk's compiler, one per compiled shader): the
//! independent witness the Mali tests compare the Vulkan-reported statistics with.

use std::collections::BTreeMap;

/// The numbers of a shaderdb line, by the word after each ("inst", "cycles", ..., "spills",
/// "fills"): "MESA_SHADER_COMPUTE shader: 263 inst, 28.75 cycles, ..., 0:0 spills:fills".
pub fn shaderdb_numbers(line: &str) -> BTreeMap<String, f64> {
    let body = line.split_once("shader:").map_or(line, |(_, b)| b);
    let mut out = BTreeMap::new();
    for part in body.split(',') {
        let mut words = part.split_whitespace();
        let (Some(value), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        if let (Some((a, b)), Some((na, nb))) = (value.split_once(':'), name.split_once(':')) {
            if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                out.insert(na.to_string(), a);
                out.insert(nb.to_string(), b);
            }
        } else if let Ok(v) = value.parse() {
            out.insert(name.to_string(), v);
        }
    }
    out
}

/// The shaderdb word a driver statistic of that name counts the same thing as, and the factor
/// between them (panvk's "Code Size" is in bytes, shaderdb's in 16-byte quadwords).
pub fn shaderdb_twin(statistic: &str) -> Option<(&'static str, f64)> {
    match statistic.to_ascii_lowercase().as_str() {
        "instruction count" => Some(("inst", 1.0)),
        "cycles" => Some(("cycles", 1.0)),
        "spills" => Some(("spills", 1.0)),
        "fills" => Some(("fills", 1.0)),
        "threads" => Some(("threads", 1.0)),
        "loops" => Some(("loops", 1.0)),
        "quadwords" => Some(("quadwords", 1.0)),
        "bundles" => Some(("bundles", 1.0)),
        "code size" => Some(("quadwords", 16.0)),
        _ => None,
    }
}

