//! `rocky serve` keeping several conversations: clients alternating between conversations get
//! prefix reuse for each (`cached_tokens`), their answers equal a from-scratch `rocky generate`
//! (a separate process, no cache), and past `--cache-slots` the least recently used
//! conversation is the one forgotten. On the GPU executor (lavapipe in CI) and the CPU
//! reference.

mod common;
mod serve_support;

use common::shared;
use serde_json::json;
use serve_support::{generate_greedy_with, Server};
use std::path::PathBuf;

fn tiny() -> PathBuf {
    shared().join("models/qwen2-tiny-q8_0.gguf")
}

/// A greedy completion: (prompt tokens, cached tokens, text).
fn complete(server: &Server, prompt: &str) -> (u64, u64, String) {
    let (status, v) = server.post_json(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v}");
    let usage = &v["usage"];
    (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
        v["choices"][0]["text"].as_str().unwrap().to_string(),
    )
}

/// The next turn of a conversation: its prompt, the answer, and a new question.
fn next_turn(prompt: &str, answer: &str, question: &str) -> String {
    format!("{prompt}{answer}{question}")
}

fn interleaved(backend: &[&str]) {
    let model = tiny();
    let mut args = vec!["--ctx", "256", "--cache-slots", "2"];
    args.extend(backend);
    let server = Server::start(&model, &args);
    let a1 = "Once upon a time there was a small GPU";
    let b1 = "The recipe for bread needs flour, water and";
    let (pa1, ca1, ta1) = complete(&server, a1);
    let (pb1, cb1, tb1) = complete(&server, b1);
    assert_eq!((ca1, cb1), (0, 0), "nothing to reuse yet");
    let a2 = next_turn(a1, &ta1, " and then it asked");
    let b2 = next_turn(b1, &tb1, " and then the baker said");
    // A's cache was saved when B came; B's when A came back.
    for (prompt, first_len) in [(&a2, pa1), (&b2, pb1)] {
        let (_, cached, text) = complete(&server, prompt);
        assert!(
            cached >= first_len,
            "{backend:?}: `{prompt}` reused {cached} tokens, its first turn had {first_len}\n{}",
            server.log()
        );
        let fresh = generate_greedy_with(&model, prompt, 8, false, backend);
        assert_eq!(
            text,
            fresh["text"].as_str().unwrap(),
            "{backend:?}: restored conversation vs a fresh `rocky generate`"
        );
    }
    assert!(server.log().contains("cache: restored a conversation"));
}

#[test]
fn alternating_conversations_each_reuse_their_own_prefix_on_the_gpu() {
    interleaved(&[]);
}

#[test]
fn alternating_conversations_each_reuse_their_own_prefix_on_the_cpu_reference() {
    interleaved(&["--cpu"]);
}

#[test]
fn past_the_slot_bound_the_least_recently_used_conversation_is_forgotten() {
    let model = tiny();
    let server = Server::start(&model, &["--ctx", "256", "--cache-slots", "1"]);
    let a1 = "Once upon a time there was a small GPU";
    let b1 = "The recipe for bread needs flour, water and";
    let c1 = "Rivers flow down from the mountains to";
    let mut answers = Vec::new();
    for p in [a1, b1, c1] {
        answers.push(complete(&server, p));
    }
    // One slot: saving B (when C came) evicted A; C is live.
    let log = server.log();
    assert_eq!(log.matches("cache: evicted").count(), 1, "{log}");
    let a2 = next_turn(a1, &answers[0].2, " and then it asked");
    let (_, cached_a, text_a) = complete(&server, &a2);
    assert_eq!(
        cached_a, 0,
        "A was evicted; its first token differs from B's and C's"
    );
    let fresh = generate_greedy_with(&model, &a2, 8, false, &[]);
    assert_eq!(text_a, fresh["text"].as_str().unwrap());
    // A's turn saved C (evicting B), so C is still reusable and B is not.
    let c2 = next_turn(c1, &answers[2].2, " where");
    let (_, cached_c, _) = complete(&server, &c2);
    assert!(cached_c >= answers[2].0, "C reused {cached_c}");
    let b2 = next_turn(b1, &answers[1].2, " salt");
    let (_, cached_b, _) = complete(&server, &b2);
    assert_eq!(cached_b, 0, "B was evicted");
}
