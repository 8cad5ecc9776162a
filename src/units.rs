//! Sizes and counts as people read them, shared by every table and progress line.

/// `468.64 MiB`, `1.79 GiB` (llama-bench's size column).
pub fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", n / (1u64 << 30) as f64)
    } else {
        format!("{:.2} MiB", n / (1u64 << 20) as f64)
    }
}

/// `494.03 M`, `3.09 B` (llama-bench's params column).
pub fn human_count(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else {
        format!("{:.2} K", n / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_like_llama_bench() {
        assert_eq!(human_bytes(491_400_032), "468.64 MiB");
        assert_eq!(human_bytes(1_929_903_264), "1.80 GiB");
        assert_eq!(human_count(3_085_938_688), "3.09 B");
        assert_eq!(human_count(494_032_768), "494.03 M");
    }
}
