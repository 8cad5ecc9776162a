//! What chat templates expect of Python beside Jinja: JSON text as Python's
//! `json.dumps(value, ensure_ascii=False, indent=…)` writes it, which is what templates'
//! `tojson` means (transformers and llama.cpp's minja both follow it: a tool's JSON schema in a
//! prompt must be the same bytes the model was trained on), and `strftime` for the date some
//! templates write.

use serde_json::Value;

/// `json.dumps(value, ensure_ascii=False)` (indent None: ", " and ": " between items), or with
/// `indent` spaces per level ("," and ": ", one item a line).
pub fn dumps(value: &Value, indent: Option<usize>) -> String {
    let mut out = String::new();
    write(value, indent, 0, &mut out);
    out
}

fn write(value: &Value, indent: Option<usize>, level: usize, out: &mut String) {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let separator = if indent.is_some() { "," } else { ", " };
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, level + 1);
                write(item, indent, level + 1, out);
            }
            newline(out, level);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, level + 1);
                out.push_str(&Value::String(key.clone()).to_string());
                out.push_str(": ");
                write(item, indent, level + 1, out);
            }
            newline(out, level);
            out.push('}');
        }
        // Scalars, [] and {}: serde_json writes them as Python does (strings escape '"', '\\'
        // and control characters only; floats keep their ".0").
        other => out.push_str(&other.to_string()),
    }
}

/// A UTC calendar date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Date {
    pub year: i64,
    /// 1 to 12.
    pub month: u32,
    pub day: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

impl Date {
    /// The UTC date of Unix time `secs` (Howard Hinnant's days-to-civil algorithm).
    pub fn of_unix(secs: u64) -> Date {
        let z = (secs / 86_400) as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Date { year, month, day }
    }

    /// C's strftime for the date fields templates use: %d %e %m %b %B %y %Y %%; other
    /// directives are written as they are.
    pub fn format(&self, format: &str) -> String {
        let month = MONTHS[self.month as usize - 1];
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('e') => out.push_str(&format!("{:2}", self.day)),
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('b') => out.push_str(&month[..3]),
                Some('B') => out.push_str(month),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_writes_what_python_writes() {
        // Expected texts from Python 3.11: json.dumps(v, ensure_ascii=False[, indent=4]).
        let v: Value = serde_json::from_str(
            r#"{"b": [1, 2.5, "x\"<y>\n"], "a": {}, "c": [], "d": null, "e": true, "f": "é"}"#,
        )
        .unwrap();
        assert_eq!(
            dumps(&v, None),
            r#"{"b": [1, 2.5, "x\"<y>\n"], "a": {}, "c": [], "d": null, "e": true, "f": "é"}"#
        );
        assert_eq!(
            dumps(&v, Some(2)),
            "{\n  \"b\": [\n    1,\n    2.5,\n    \"x\\\"<y>\\n\"\n  ],\n  \"a\": {},\n  \"c\": [],\n  \"d\": null,\n  \"e\": true,\n  \"f\": \"é\"\n}"
        );
    }

    #[test]
    fn dates_are_the_calendar_s() {
        // `date -u -d @SECS +'%d %b %Y'`.
        for (secs, want) in [
            (0, "01 Jan 1970"),
            (951_782_400, "29 Feb 2000"),
            (1_796_499_216, "05 Dec 2026"),
            (4_107_542_400, "01 Mar 2100"),
        ] {
            assert_eq!(Date::of_unix(secs).format("%d %b %Y"), want, "{secs}");
        }
        assert_eq!(
            Date::of_unix(0).format("%B %e, %y %m %% %H"),
            "January  1, 70 01 % %H"
        );
    }
}
