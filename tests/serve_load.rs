//! `rocky serve` under load and with clients that leave: concurrent requests beyond the queue
//! are answered 503 with a JSON error, none is lost, the server's memory stays flat over 200
//! requests from 16 clients, and a client that disconnects mid-stream stops its generation
//! while the server keeps serving.

mod common;
mod serve_support;

use common::shared;
use serde_json::{json, Value};
use serve_support::{curl, Server};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tiny() -> PathBuf {
    shared().join("models/qwen2-tiny-q8_0.gguf")
}

#[test]
fn concurrent_clients_get_200_or_503_and_none_is_lost() {
    let mut server = Server::start(&tiny(), &["--ctx", "128", "--queue", "2"]);
    let url = server.url("/v1/completions");
    let clients = 8;
    let per_client = 5;
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let url = url.clone();
            std::thread::spawn(move || {
                (0..per_client)
                    .map(|i| {
                        let body = json!({"prompt": format!("client {c} request {i}"), "max_tokens": 4, "temperature": 0});
                        curl(&url, Some(&body.to_string()), &[])
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<(u16, String)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(answers.len(), clients * per_client);
    let mut ok = 0;
    let mut busy = 0;
    for (status, body) in &answers {
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        match status {
            200 => {
                assert_eq!(v["usage"]["completion_tokens"], 4, "{body}");
                ok += 1;
            }
            503 => {
                assert_eq!(v["error"]["type"], "server_busy", "{body}");
                busy += 1;
            }
            s => panic!("status {s}: {body}"),
        }
    }
    assert_eq!(ok + busy, 40);
    assert!(ok >= 3, "{ok} answered, {busy} rejected");
    // Every accepted request ran to its end: one log line each. The worker writes its line
    // after the reply's last bytes went out, so the last line may trail the client's join by
    // a moment (a run here read 14 lines of 15): wait for it, a bounded while.
    let logged = |log: &str| log.matches("request: ").count();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut log = server.log();
    while logged(&log) < ok && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        log = server.log();
    }
    assert_eq!(logged(&log), ok, "{log}");
    assert!(server.alive());
    assert_eq!(server.get("/health").0, 200);
}

#[test]
fn a_client_that_leaves_mid_stream_stops_its_generation() {
    let mut server = Server::start(&tiny(), &["--ctx", "4096"]);
    // A long generation the client abandons after a second.
    let body = json!({"prompt": "Tell me everything", "max_tokens": 4000, "temperature": 0, "stream": true});
    let start = Instant::now();
    let (status, _) = curl(
        &server.url("/v1/completions"),
        Some(&body.to_string()),
        &["-N", "--max-time", "2"],
    );
    assert_eq!(status, 200, "the stream had started");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !server.log().contains("stopped by cancelled") {
        assert!(
            Instant::now() < deadline,
            "generation did not stop:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Well short of 4000 tokens (the tiny model's decode takes tens of milliseconds a token).
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("stopped by cancelled"))
        .unwrap();
    let generated: usize = line
        .split(", ")
        .find(|p| p.contains(" generated in "))
        .and_then(|p| p.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(generated < 4000, "{line}");
    assert!(server.alive());
    // A non-streaming client that gives up: its request is dropped as well.
    let body = json!({"prompt": "Tell me more", "max_tokens": 4000, "temperature": 0});
    let (status, _) = curl(
        &server.url("/v1/completions"),
        Some(&body.to_string()),
        &["--max-time", "2"],
    );
    assert_eq!(status, 0, "curl gave up before an answer");
    while server.log().matches("stopped by cancelled").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "generation did not stop:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, text) = server.post(
        "/v1/completions",
        &json!({"prompt": "Next", "max_tokens": 2, "temperature": 0}).to_string(),
    );
    assert_eq!(status, 200, "{text} after {:?}", start.elapsed());
}

/// `total` requests from `clients` threads, each taking the next request number until none is
/// left; even numbers stream; a client told 503 waits a second (so a good share is answered). Every curl gives up after 60 s, so a lost request shows as a
/// status 0 rather than a hang. Returns (number, status, body) per request.
fn load(server: &Server, clients: usize, first: usize, total: usize) -> Vec<(usize, u16, String)> {
    let next = Arc::new(AtomicUsize::new(first));
    let url = server.url("/v1/completions");
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (next, url) = (next.clone(), url.clone());
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= first + total {
                        return answers;
                    }
                    let stream = i % 2 == 0;
                    let body = json!({
                        "prompt": format!("client {c} asks question number {i} about"),
                        "max_tokens": 4,
                        "temperature": 0,
                        "stream": stream,
                    });
                    let mut extra = vec!["--max-time", "60"];
                    if stream {
                        extra.push("-N");
                    }
                    let (status, text) = curl(&url, Some(&body.to_string()), &extra);
                    // As a polite client: wait a little after "busy" before the next request.
                    if status == 503 {
                        std::thread::sleep(Duration::from_millis(1000));
                    }
                    answers.push((i, status, text));
                }
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Counts (answered, rejected); panics on anything but a whole answer or a 503 JSON error.
fn tally(answers: &[(usize, u16, String)]) -> (usize, usize) {
    let (mut ok, mut busy) = (0, 0);
    for (i, status, body) in answers {
        match (status, i % 2 == 0) {
            (200, true) => {
                assert!(body.trim_end().ends_with("data: [DONE]"), "{i}: {body}");
                ok += 1;
            }
            (200, false) => {
                let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
                assert_eq!(v["usage"]["completion_tokens"], 4, "{body}");
                ok += 1;
            }
            (503, _) => {
                let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
                assert_eq!(v["error"]["type"], "server_busy", "{body}");
                busy += 1;
            }
            (s, _) => panic!("request {i}: status {s}: {body}"),
        }
    }
    (ok, busy)
}

#[test]
fn sixteen_clients_200_requests_all_answered_or_rejected_and_memory_stays_flat() {
    let mut server = Server::start(&tiny(), &["--ctx", "128", "--queue", "8", "--cpu"]);
    // The CPU reference: the same worker, queue and conversation cache as on the GPU, and the
    // fastest backend for the tiny model on this shared 2-core machine (~0.3 s a request).
    // Warm-up: pipelines, allocator pools and the conversation cache's slots fill here.
    let warm = load(&server, 16, 0, 20);
    let (warm_ok, _) = tally(&warm);
    let rss_warm = server.rss_kib();
    let start = Instant::now();
    let answers = load(&server, 16, 20, 200);
    let took = start.elapsed();
    let rss_after = server.rss_kib();
    assert_eq!(answers.len(), 200, "none lost");
    let (ok, busy) = tally(&answers);
    assert_eq!(ok + busy, 200);
    // Every accepted request ran to its end: one log line each (the last may trail the
    // client's join by a moment, as in the test above: wait for it, a bounded while).
    let logged = |log: &str| log.matches("request: ").count();
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let mut log = server.log();
    while logged(&log) < warm_ok + ok && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        log = server.log();
    }
    assert!(ok >= 16, "{ok} answered, {busy} rejected\n{log}");
    assert_eq!(logged(&log), warm_ok + ok, "{log}");
    println!(
        "200 requests from 16 clients in {:.1} s: {ok} answered, {busy} rejected (503); \
         RSS {rss_warm} KiB after the warm-up 20, {rss_after} KiB after the 200",
        took.as_secs_f64()
    );
    // Flat: within 5 % (and 4 MiB of allocator slack) of the warmed-up server's.
    assert!(
        rss_after <= rss_warm + rss_warm / 20 + 4096,
        "RSS grew from {rss_warm} KiB to {rss_after} KiB over 200 requests"
    );
    assert!(server.alive());
    assert_eq!(server.get("/health").0, 200);
}
