//! Placeholder: filled by the tuner issue.
