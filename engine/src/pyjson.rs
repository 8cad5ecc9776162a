//! JSON text as Python's `json.dumps(value, ensure_ascii=False, indent=…)` writes it, which
//! is what chat templates' `tojson` means (transformers and llama.cpp's minja both follow it):
//! a tool's JSON schema in a prompt must be the same bytes the model was trained on.

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
}
