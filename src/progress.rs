//! Progress bars on standard error, redrawn in place — only when standard error is a terminal,
//! so logs, pipes and tests see no control characters (commands print their own plain lines
//! there). Hand-written: one bar at a time is all rocky needs, not a terminal-UI crate.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws at most this often: a bar must not slow down what it reports on.
const REDRAW: Duration = Duration::from_millis(100);
const WIDTH: usize = 24;

pub struct Bar {
    label: String,
    total: u64,
    live: bool,
    last_draw: Option<Instant>,
    drawn: bool,
}

impl Bar {
    pub fn new(label: impl Into<String>, total: u64) -> Bar {
        Bar {
            label: label.into(),
            total: total.max(1),
            live: std::io::stderr().is_terminal(),
            last_draw: None,
            drawn: false,
        }
    }

    /// For totals learnt as the work goes (the bytes of an upload).
    pub fn set_total(&mut self, total: u64) {
        self.total = total.max(1);
    }

    /// Whether the bar draws (standard error is a terminal).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Shows `done` of the total with a short detail (`3/8 trials, best 0.51 ms`).
    pub fn set(&mut self, done: u64, detail: &str) {
        if !self.live {
            return;
        }
        let now = Instant::now();
        let finished = done >= self.total;
        if !finished && self.last_draw.is_some_and(|t| now - t < REDRAW) {
            return;
        }
        self.last_draw = Some(now);
        let line = render(&self.label, done.min(self.total), self.total, detail);
        // \r and "erase to end of line": the new text may be shorter than the old.
        eprint!("\r{line}\x1b[K");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    /// Removes the bar so the next printed line starts clean.
    pub fn clear(&mut self) {
        if self.live && self.drawn {
            eprint!("\r\x1b[K");
            let _ = std::io::stderr().flush();
            self.drawn = false;
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `label [#########---------------]  37% detail`.
fn render(label: &str, done: u64, total: u64, detail: &str) -> String {
    let filled = (done as u128 * WIDTH as u128 / total as u128) as usize;
    let percent = done as u128 * 100 / total as u128;
    format!(
        "{label} [{}{}] {percent:>3}% {detail}",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_in_proportion_and_never_overflow() {
        assert_eq!(
            render("load", 0, 4, "x"),
            format!("load [{}]   0% x", "-".repeat(24))
        );
        assert_eq!(
            render("load", 1, 4, ""),
            format!("load [{}{}]  25% ", "#".repeat(6), "-".repeat(18))
        );
        assert_eq!(
            render("load", 4, 4, "done"),
            format!("load [{}] 100% done", "#".repeat(24))
        );
        // Byte counts of multi-GB models do not overflow the arithmetic.
        let big = 3u64 << 40;
        assert!(render("w", big / 2, big, "").contains(" 50% "));
    }
}
