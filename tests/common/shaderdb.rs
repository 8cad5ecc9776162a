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

/// The shaderdb words a driver statistic of that name counts the same thing as, each with the
/// factor between them (panvk 25.0.7's "Code Size" is in bytes, its shaderdb line in 16-byte
/// quadwords; 26.x prints "code size" in bytes). Names as panvk 25.0.7 and 26.1.6 report them.
pub fn shaderdb_twins(statistic: &str) -> &'static [(&'static str, f64)] {
    match statistic.to_ascii_lowercase().as_str() {
        "instruction count" | "instructions" => &[("inst", 1.0), ("instrs", 1.0)],
        "cycles" => &[("cycles", 1.0)],
        "fma" => &[("fma", 1.0)],
        "cvt" => &[("cvt", 1.0)],
        "sfu" => &[("sfu", 1.0)],
        "load/store" => &[("ls", 1.0)],
        "spills" => &[("spills", 1.0)],
        "fills" => &[("fills", 1.0)],
        "threads" => &[("threads", 1.0)],
        "loops" => &[("loops", 1.0)],
        "registers used" => &[("registers", 1.0)],
        "code size" => &[("quadwords", 16.0), ("code", 1.0)],
        _ => &[],
    }
}

/// The shaderdb value `statistic` should equal, if the line has a twin of it.
pub fn shaderdb_twin_value(statistic: &str, line: &BTreeMap<String, f64>) -> Option<f64> {
    shaderdb_twins(statistic)
        .iter()
        .find_map(|(word, factor)| line.get(*word).map(|v| v * factor))
}
