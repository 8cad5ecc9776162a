//! Counters for `/metrics`, in Prometheus' text format (llama-server's figures under rocky's
//! names): requests, tokens, prefill and decode time (so tok/s is a rate of two counters),
//! the queue's depth and prefix-cache reuse. Atomics: the worker adds, the HTTP side reads.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default, Debug)]
pub struct Metrics {
    /// Requests accepted into the queue.
    pub requests: AtomicU64,
    /// Requests refused because the queue was full (503).
    pub rejected: AtomicU64,
    /// Requests that ended with an answer.
    pub completed: AtomicU64,
    /// Requests waiting in the queue now.
    pub waiting: AtomicU64,
    /// 1 while a request runs.
    pub running: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens whose keys and values came from the cache.
    pub cached_tokens: AtomicU64,
    /// Requests that reused at least one cached token.
    pub cache_hits: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Microseconds spent evaluating prompts (the cached part not included) and decoding.
    pub prompt_us: AtomicU64,
    pub decode_us: AtomicU64,
}

impl Metrics {
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut put = |name: &str, kind: &str, help: &str, value: f64| {
            out.push_str(&format!(
                "# HELP rocky_{name} {help}\n# TYPE rocky_{name} {kind}\nrocky_{name} {value}\n"
            ));
        };
        let get = |a: &AtomicU64| a.load(Relaxed) as f64;
        put(
            "requests_total",
            "counter",
            "Requests accepted into the queue.",
            get(&self.requests),
        );
        put(
            "requests_rejected_total",
            "counter",
            "Requests refused with 503 (queue full).",
            get(&self.rejected),
        );
        put(
            "requests_completed_total",
            "counter",
            "Requests answered.",
            get(&self.completed),
        );
        put(
            "requests_waiting",
            "gauge",
            "Requests waiting in the queue.",
            get(&self.waiting),
        );
        put(
            "requests_running",
            "gauge",
            "Requests running on the model.",
            get(&self.running),
        );
        put(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens, cached ones included.",
            get(&self.prompt_tokens),
        );
        put(
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens reused from the KV cache.",
            get(&self.cached_tokens),
        );
        put(
            "cache_hits_total",
            "counter",
            "Requests that reused a cached prefix.",
            get(&self.cache_hits),
        );
        put(
            "tokens_generated_total",
            "counter",
            "Tokens generated.",
            get(&self.generated_tokens),
        );
        put(
            "prompt_seconds_total",
            "counter",
            "Time evaluating prompts.",
            get(&self.prompt_us) / 1e6,
        );
        put(
            "decode_seconds_total",
            "counter",
            "Time generating tokens.",
            get(&self.decode_us) / 1e6,
        );
        let rate = |tokens: f64, us: f64| if us > 0.0 { tokens / (us / 1e6) } else { 0.0 };
        put(
            "prompt_tokens_per_second",
            "gauge",
            "Evaluated prompt tokens per second, over all requests.",
            rate(
                get(&self.prompt_tokens) - get(&self.cached_tokens),
                get(&self.prompt_us),
            ),
        );
        put(
            "decode_tokens_per_second",
            "gauge",
            "Generated tokens per second, over all requests.",
            rate(get(&self.generated_tokens), get(&self.decode_us)),
        );
        out
    }
}
