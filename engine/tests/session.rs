//! The engine from a user's side: typed errors for bad input, and a session on the Vulkan
//! device (lavapipe in CI) that generates the CPU reference's greedy tokens and restores a KV
//! snapshot to the logits a fresh prefill gives.

use rocky_engine::{
    Database, EngineOptions, Evaluator, GenerateOptions, LoadError, MathFamily, Model,
    SamplerParams, Session, SessionError,
};
use rocky_models::reference::compare_logits;
use rocky_runtime::executor::ExecError;
use std::path::PathBuf;

/// ../shared beside the checkout (override: ROCKY_SHARED), as the CLI's tests find it.
fn shared() -> PathBuf {
    std::env::var_os("ROCKY_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

fn tiny() -> Model {
    Model::open(shared().join("models/qwen2-tiny-q8_0.gguf")).expect("the tiny Qwen2 test model")
}

/// f32 math (as the GPU tests' golden comparisons) and no tuning database: the GPU differs
/// from the CPU reference by summation order only.
fn exact() -> EngineOptions {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    EngineOptions {
        database: Database::None,
        math: Some(MathFamily::F32),
        ubatch: Some(8),
        ..EngineOptions::default()
    }
}

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7919 + 13 * seed) % 1000 + 10)
        .collect()
}

#[test]
fn a_missing_model_is_named() {
    let e = Model::open("/nonexistent/model.gguf").unwrap_err();
    assert!(
        matches!(&e, LoadError::Missing { path } if path.ends_with("model.gguf")),
        "{e:?}"
    );
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
}

#[test]
fn a_file_that_is_not_gguf_is_malformed() {
    let path = std::env::temp_dir().join(format!("rocky-engine-not-gguf-{}", std::process::id()));
    std::fs::write(&path, b"definitely not a GGUF file, just some text").unwrap();
    let e = Model::open(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(e, LoadError::Malformed { .. }), "{e:?}");
}

#[test]
fn bad_options_are_refused_before_any_device_work() {
    let model = tiny();
    for (ubatch, max_dispatches) in [(Some(0), None), (Some(4097), None), (None, Some(0))] {
        let options = EngineOptions {
            ubatch,
            cb_max_dispatches: max_dispatches,
            // A selector no device matches: reaching the device would fail differently.
            device: rocky_engine::DeviceSelector::Name("no such device anywhere".into()),
            ..EngineOptions::default()
        };
        let e = Session::open(&model, &options, 16).err().expect("refused");
        match (ubatch, e) {
            (Some(u), SessionError::UbatchOutOfRange { ubatch }) => assert_eq!(ubatch, u),
            (None, SessionError::NoDispatchesPerCommandBuffer) => {}
            (_, e) => panic!("{ubatch:?}/{max_dispatches:?}: {e:?}"),
        }
    }
}

#[test]
fn session_generates_the_cpu_reference_s_greedy_tokens() {
    let model = tiny();
    let ids = prompt(13, 1);
    let options = GenerateOptions {
        max_new_tokens: 12,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    let n_ctx = ids.len() + options.max_new_tokens;
    let mut cpu = model.cpu_evaluator(n_ctx);
    let want = model
        .generate(&mut cpu, &ids, &options, &mut |_| {})
        .unwrap();
    let mut session = Session::open(&model, &exact(), n_ctx).unwrap();
    session.prepare().unwrap();
    session.prepare_decode().unwrap();
    let mut streamed = String::new();
    let got = session
        .generate(&ids, &options, &mut |t| streamed.push_str(t))
        .unwrap();
    assert_eq!(got.tokens, want.tokens);
    assert_eq!(got.text, want.text);
    assert_eq!(streamed, got.text);
    // Every decode step was accounted for.
    assert_eq!(session.decode_time().steps as usize, got.decode_steps);
    // A token outside the vocabulary is an error of the executor, not a panic.
    session.reset();
    let bad = model.n_vocab() as u32;
    match session.prefill(&[1, bad]) {
        Err(SessionError::Exec(ExecError::Unsupported(m))) => {
            assert!(m.contains(&bad.to_string()), "{m}")
        }
        other => panic!("{:?}", other.map(|l| l.len())),
    }
}

#[test]
fn a_restored_snapshot_continues_as_a_fresh_prefill() {
    let model = tiny();
    let mut session = Session::open(&model, &exact(), 96).unwrap();
    let a = prompt(30, 1);
    let mut a2 = a.clone();
    a2.extend(prompt(9, 4));
    session.prefill(&a).unwrap();
    let snapshot = session.snapshot_kv().unwrap().expect("30 positions");
    assert_eq!(snapshot.n_past(), 30);
    session.reset();
    session.prefill(&prompt(50, 2)).unwrap();
    session.restore_kv(&snapshot, 30).unwrap();
    assert_eq!(session.n_past(), 30);
    let restored = session.prefill(&a2[30..]).unwrap();
    session.reset();
    let fresh = session.prefill(&a2).unwrap();
    let cmp = compare_logits(&restored, &fresh);
    assert!(
        cmp.max_abs_diff < 2e-3,
        "restored vs fresh: {}",
        cmp.max_abs_diff
    );
    // The same through the Evaluator trait that rocky-generate and rocky serve use.
    let ev: &mut dyn Evaluator = &mut session;
    let snap = ev.snapshot().unwrap().expect("39 positions");
    assert_eq!(snap.n_past, 39);
    ev.reset();
    ev.restore(snap, 30).unwrap();
    assert_eq!(ev.n_past(), 30);
    let again = ev.eval(&a2[30..]).unwrap();
    let cmp = compare_logits(&again, &fresh);
    assert!(
        cmp.max_abs_diff < 2e-3,
        "trait restore vs fresh: {}",
        cmp.max_abs_diff
    );
}
