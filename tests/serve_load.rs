//! `rocky serve` under load and with clients that leave: concurrent requests beyond the queue
//! are answered 503 with a JSON error, none is lost, and a client that disconnects mid-stream
//! stops its generation while the server keeps serving.

mod common;
mod serve_support;

use common::shared;
use serde_json::{json, Value};
use serve_support::{curl, Server};
use std::path::PathBuf;
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
    // Every accepted request ran to its end: one log line each.
    let log = server.log();
    assert_eq!(log.matches("request: ").count(), ok, "{log}");
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
