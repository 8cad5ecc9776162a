//! `rocky serve` from the outside: a real server process on 127.0.0.1 and curl as the client.
//! Greedy answers are checked against `rocky generate` (a separate process through the CLI,
//! no server and no cache reuse), so the server's prompt handling, its streaming and its
//! prefix reuse are each compared with an independent path.

mod common;
mod serve_support;

use common::shared;
use serde_json::{json, Value};
use serve_support::{generate_greedy, Server};
use std::path::PathBuf;

fn tiny() -> PathBuf {
    shared().join("models/qwen2-tiny-q8_0.gguf")
}

/// OpenAI's finish_reason for `rocky generate`'s stop name.
fn finish_reason(stop: &Value) -> &'static str {
    match stop.as_str().unwrap() {
        "end_of_generation" | "stop_string" => "stop",
        _ => "length",
    }
}

/// The concatenated text of a stream's chunks (`text` or `delta.content`), and its last
/// chunk before `[DONE]`.
fn streamed(data: &[String]) -> (String, Value) {
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text = chunks
        .iter()
        .filter_map(|c| {
            let choice = &c["choices"][0];
            choice["text"]
                .as_str()
                .or(choice["delta"]["content"].as_str())
        })
        .collect();
    (text, chunks.last().unwrap().clone())
}

#[test]
fn completions_plain_and_streamed_equal_rocky_generate() {
    let model = tiny();
    let prompt = "The capital of France is";
    let want = generate_greedy(&model, prompt, 16, false);
    let server = Server::start(&model, &["--ctx", "512"]);
    let body = json!({"model": "qwen2-tiny-q8_0.gguf", "prompt": prompt, "max_tokens": 16, "temperature": 0});

    let (status, v) = server.post_json("/v1/completions", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(
        v["choices"][0]["text"], want["text"],
        "server vs rocky generate"
    );
    assert_eq!(
        v["choices"][0]["finish_reason"],
        finish_reason(&want["stop"])
    );
    let usage = &v["usage"];
    assert_eq!(usage["prompt_tokens"], want["prompt_tokens"]);
    assert_eq!(usage["completion_tokens"], want["generated_tokens"]);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);

    // The same request streamed: the cache holds the prompt now, so all but its last token
    // are reused, and the text is still the same.
    let mut body = body;
    body["stream"] = json!(true);
    let (status, data) = server.stream("/v1/completions", &body);
    assert_eq!(status, 200);
    let (text, last) = streamed(&data);
    assert_eq!(
        text,
        want["text"].as_str().unwrap(),
        "streamed vs rocky generate"
    );
    assert!(data.len() > 3, "one chunk per piece of text: {data:?}");
    assert_eq!(
        last["choices"][0]["finish_reason"],
        finish_reason(&want["stop"])
    );
    let prompt_tokens = want["prompt_tokens"].as_u64().unwrap();
    assert_eq!(last["usage"]["prompt_tokens"], prompt_tokens);
    assert_eq!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt_tokens - 1
    );
}

#[test]
fn chat_uses_the_gguf_template_like_generate_chat() {
    let model = tiny();
    let want = generate_greedy(&model, "Write a haiku.", 10, true);
    let server = Server::start(&model, &["--ctx", "512"]);
    let body = json!({"messages": [{"role": "user", "content": "Write a haiku."}], "max_tokens": 10, "temperature": 0});
    let (status, v) = server.post_json("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], want["text"]);
    assert_eq!(v["usage"]["prompt_tokens"], want["prompt_tokens"]);

    let mut body = body;
    body["stream"] = json!(true);
    let (status, data) = server.stream("/v1/chat/completions", &body);
    assert_eq!(status, 200);
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let (text, last) = streamed(&data);
    assert_eq!(text, want["text"].as_str().unwrap());
    assert!(last["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}

/// The agent case: each turn resends the conversation. The second turn reuses the first's
/// cached tokens, and its greedy text equals `rocky generate` on the whole second prompt
/// evaluated from scratch.
#[test]
fn a_second_turn_reuses_the_first_and_answers_as_a_fresh_run() {
    let model = tiny();
    let server = Server::start(&model, &["--ctx", "512"]);
    let turn1 = "Once upon a time there was a small GPU";
    let (status, v1) = server.post_json(
        "/v1/completions",
        &json!({"prompt": turn1, "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v1}");
    let p1 = v1["usage"]["prompt_tokens"].as_u64().unwrap();
    let turn2 = format!(
        "{turn1}{} and then the user asked again",
        v1["choices"][0]["text"].as_str().unwrap()
    );
    let (status, v2) = server.post_json(
        "/v1/completions",
        &json!({"prompt": turn2, "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v2}");
    let cached = v2["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= p1,
        "turn 2 reused {cached} tokens, turn 1 had {p1}"
    );
    assert_eq!(
        v2["timings"]["prompt_n"].as_u64().unwrap(),
        v2["usage"]["prompt_tokens"].as_u64().unwrap() - cached
    );
    let fresh = generate_greedy(&model, &turn2, 12, false);
    assert_eq!(v2["usage"]["prompt_tokens"], fresh["prompt_tokens"]);
    assert_eq!(
        v2["choices"][0]["text"], fresh["text"],
        "with reuse vs from scratch"
    );

    // Chat turns: the second conversation starts with the first's rendered prompt.
    let user = json!({"role": "user", "content": "Name a colour."});
    let (_, c1) = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": [user], "max_tokens": 6, "temperature": 0}),
    );
    let reply = c1["choices"][0]["message"]["content"].clone();
    let (status, c2) = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": [user, {"role": "assistant", "content": reply}, {"role": "user", "content": "Another?"}], "max_tokens": 6, "temperature": 0}),
    );
    assert_eq!(status, 200, "{c2}");
    let cached = c2["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= c1["usage"]["prompt_tokens"].as_u64().unwrap(),
        "{c1} then {c2}"
    );

    // llama-server's benchmark fields (tools/serve-turns.py sends both to either server):
    // accepted, and with ignore_eos the reply runs to max_tokens (the masking itself is
    // checked in serve's worker tests).
    let (status, v) = server.post_json(
        "/v1/completions",
        &json!({"prompt": turn1, "max_tokens": 20, "temperature": 0, "ignore_eos": true, "cache_prompt": true}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 20, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
}

#[test]
fn bad_requests_get_4xx_json_errors_and_the_server_keeps_serving() {
    let mut server = Server::start(&tiny(), &["--ctx", "64"]);
    let long_prompt = "word ".repeat(200);
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "/v1/completions",
            "{\"prompt\": ".into(),
            400,
            "not valid JSON",
        ),
        ("/v1/completions", "not json".into(), 400, "not valid JSON"),
        (
            "/v1/completions",
            r#"{"prompt":"a","max_tokens":"ten"}"#.into(),
            400,
            "wrong type",
        ),
        (
            "/v1/completions",
            r#"{"prompt":"a","temperature":"hot"}"#.into(),
            400,
            "wrong type",
        ),
        (
            "/v1/completions",
            r#"{"prompt":5}"#.into(),
            400,
            "`prompt` must be",
        ),
        (
            "/v1/completions",
            r#"{"prompt":"a","stream":"yes"}"#.into(),
            400,
            "wrong type",
        ),
        (
            "/v1/completions",
            r#"{"prompt":"a","model":"gpt-4o"}"#.into(),
            404,
            "does not exist",
        ),
        (
            "/v1/completions",
            json!({"prompt": long_prompt}).to_string(),
            400,
            "context holds 64",
        ),
        (
            "/v1/completions",
            json!({"prompt": long_prompt, "stream": true}).to_string(),
            400,
            "context holds 64",
        ),
        (
            "/v1/completions",
            r#"{"prompt":[1,2,4000000000]}"#.into(),
            400,
            "outside the vocabulary",
        ),
        ("/v1/completions", r#"{"prompt":""}"#.into(), 400, "empty"),
        (
            "/v1/chat/completions",
            r#"{"messages":"hi"}"#.into(),
            400,
            "wrong type",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#.into(),
            400,
            "image_url",
        ),
        ("/v1/nothing", "{}".into(), 404, "no such endpoint"),
    ];
    for (path, body, status, message) in &cases {
        let (got, text) = server.post(path, body);
        assert_eq!(got, *status, "{path} {body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let error = &v["error"];
        assert!(error["type"].is_string(), "{text}");
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{body}: {text}"
        );
    }
    let (_, text) = server.post(
        "/v1/completions",
        &json!({"prompt": long_prompt}).to_string(),
    );
    assert!(text.contains("context_length_exceeded"), "{text}");
    assert!(server.alive());
    assert_eq!(
        server.get("/health"),
        (200, r#"{"status":"ok"}"#.to_string())
    );
    let (status, v) = server.post_json(
        "/v1/completions",
        &json!({"prompt": "Still there?", "max_tokens": 3, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], "qwen2-tiny-q8_0.gguf");
}

/// The real Gemma 3 270M GGUF carries no chat template: chat requests get Gemma's turn format
/// built in, checked against `rocky generate` on the prompt written out by hand.
#[test]
fn gemma3_without_a_template_chats_in_its_built_in_format() {
    let model = common::asset("gemma-3-270m-q4_k_m.gguf");
    let by_hand =
        "<start_of_turn>user\nBe brief.\n\nWhat is a GPU?<end_of_turn>\n<start_of_turn>model\n";
    let want = generate_greedy(&model, by_hand, 6, false);
    let server = Server::start(&model, &["--ctx", "256"]);
    assert!(server.log().contains("built-in gemma3"), "{}", server.log());
    let (status, v) = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a GPU?"}], "max_tokens": 6, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], want["prompt_tokens"]);
    assert_eq!(v["choices"][0]["message"]["content"], want["text"]);
}
