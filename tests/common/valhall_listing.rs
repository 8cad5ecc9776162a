//! Mesa's `BIFROST_MESA_DEBUG=shaders` listing of a Valhall shader: load/store messages per
//! iteration of the outermost loop, with inner loops multiplied by their trip counts. The
//! shaderdb line counts every loop body once, so it under-counts kernels whose inner loops are
//! rolled; this counts what one key block really issues. A message (LOAD*, STORE*, LD_*, ST_*,
//! ATOM*, LEA_BUF*; not BARRIER) is one load/store cycle of the shaderdb estimate: its `ls` is
//! the sum over the blocks, each once (Mesa 25.0.7).

/// One block of the final listing: its load/store messages and its successors.
struct Block {
    id: u32,
    messages: u32,
    successors: Vec<u32>,
}

/// The blocks of the last listing in `log` (the scheduled one), in order.
fn final_blocks(log: &str) -> Vec<Block> {
    let lines: Vec<&str> = log.lines().collect();
    let Some(start) = lines.iter().rposition(|l| l.starts_with("block0 {")) else {
        return Vec::new();
    };
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for line in &lines[start..] {
        if let Some(rest) = line.strip_prefix("block") {
            if let Some(id) = rest.strip_suffix(" {").and_then(|n| n.parse().ok()) {
                current = Some(Block {
                    id,
                    messages: 0,
                    successors: Vec::new(),
                });
                continue;
            }
        }
        let Some(block) = current.as_mut() else {
            continue;
        };
        if line.starts_with('}') {
            // "} -> block3 block2  from block0 block19" (no arrow after the last block)
            let targets = line
                .split_once("->")
                .map(|(_, t)| t.split(" from ").next().unwrap_or(""))
                .unwrap_or("");
            block.successors = targets
                .split_whitespace()
                .filter_map(|t| t.strip_prefix("block").and_then(|n| n.parse().ok()))
                .collect();
            blocks.push(current.take().expect("a block"));
            continue;
        }
        let is_message = line.split_whitespace().any(|word| {
            ["LOAD", "STORE", "LD_", "ST_", "ATOM", "LEA_BUF"]
                .iter()
                .any(|p| word.starts_with(p))
        });
        if is_message {
            block.messages += 1;
        }
    }
    blocks
}

/// Load/store messages per iteration of the outermost loop of the shader in `log`, the inner
/// loops (in the order their first blocks come) run `inner_trips` times each. Errors where
/// the listing has no loop, or a different number of inner loops.
pub fn messages_per_outer_iteration(log: &str, inner_trips: &[u32]) -> Result<u32, String> {
    let blocks = final_blocks(log);
    // A back edge tail → head (head ≤ tail) closes a loop over the blocks head..=tail.
    let mut loops: Vec<(u32, u32)> = blocks
        .iter()
        .flat_map(|b| {
            b.successors
                .iter()
                .filter(move |&&s| s <= b.id)
                .map(move |&s| (s, b.id))
        })
        .collect();
    loops.sort();
    let Some(&(head, tail)) = loops.first() else {
        return Err("the listing has no loop".into());
    };
    let inner: Vec<(u32, u32)> = loops[1..]
        .iter()
        .copied()
        .filter(|&(h, t)| head <= h && t <= tail)
        .collect();
    if inner.len() != inner_trips.len() {
        return Err(format!(
            "{} inner loops {inner:?}, {} trip counts given",
            inner.len(),
            inner_trips.len()
        ));
    }
    Ok(blocks
        .iter()
        .filter(|b| (head..=tail).contains(&b.id))
        .map(|b| {
            let trips: u32 = inner
                .iter()
                .zip(inner_trips)
                .filter(|((h, t), _)| (*h..=*t).contains(&b.id))
                .map(|(_, &n)| n)
                .product();
            b.messages * trips
        })
        .sum())
}

/// Load/store messages of the whole listing, every block once: what the shaderdb line's `ls`
/// estimate counts (a check that this parser reads the listing as the driver does).
pub fn messages_once(log: &str) -> u32 {
    final_blocks(log).iter().map(|b| b.messages).sum()
}
