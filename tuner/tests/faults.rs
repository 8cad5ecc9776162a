//! Failure injection: a tuning run meets one injected failure of each kind (spirv-val, pipeline
//! creation, out-of-memory, device loss, timeout, mismatch) and must record each as a failed
//! trial of that kind, survive it (a lost device is re-opened), measure the following trials
//! normally, never pick a failed trial as the best, and leave everything in the database.
//!
//! Needs a Vulkan device (lavapipe is enough) and spirv-val; FAILS without them, so a missing
//! driver or validator never turns into a silently skipped test. `ROCKY_TEST_DEVICE` (index
//! or name) picks the device, else the best one.

use rocky_compiler::{
    default_schedule, instantiate, ActType, DeviceCaps, GemmWorkload, WeightFormat, Workload,
};
use rocky_runtime::{Context, DeviceSelector};
use rocky_tuner::fault::{drop_last_instruction, INJECTED};
use rocky_tuner::spirv_val::{spirv_val_path, validate, ValidationError};
use rocky_tuner::{
    Fault, FaultPlan, MeasureOptions, ModelWorkload, Progress, Strategy, TuneOptions, Tuner,
};
use rocky_tuning_db::{Trial, TrialStatus, TuningDb};
use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant};

/// Clean trials measured after the last injected fault.
const CLEAN_AFTER: usize = 4;

fn workload() -> Workload {
    Workload::Gemm(GemmWorkload {
        m: 16,
        n: 64,
        k: 256,
        act: ActType::F32,
        weight: WeightFormat::Q8_0,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias: false,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    })
}

/// Mesa needs XDG_RUNTIME_DIR, and the tuner saves a pipeline cache under XDG_CACHE_HOME:
/// both go to a private directory, set before any thread uses Vulkan.
fn private_environment() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = temp_dir("env");
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
        std::env::set_var("XDG_CACHE_HOME", dir.join("cache"));
    });
}

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("rocky-tuner-faults-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn selector() -> DeviceSelector {
    let text = std::env::var("ROCKY_TEST_DEVICE").unwrap_or_default();
    text.parse().unwrap()
}

fn require_spirv_val() {
    assert!(
        spirv_val_path().is_some(),
        "spirv-val is not on PATH: install the `spirv-tools` package (apt-get install spirv-tools)"
    );
}

fn failure(t: &Trial) -> Option<(rocky_tuning_db::FailureKind, &str)> {
    match &t.status {
        TrialStatus::Ok => None,
        TrialStatus::Failed { kind, message } => Some((*kind, message.as_str())),
    }
}

#[test]
fn each_injected_failure_is_recorded_and_survived() {
    private_environment();
    require_spirv_val();
    assert!(
        MeasureOptions::default().validate,
        "validation is on when spirv-val is found"
    );
    let ctx = Context::new(&selector())
        .unwrap_or_else(|e| panic!("this test needs a Vulkan device (lavapipe is enough): {e}"));
    let dir = temp_dir("db");
    let db_path = dir.join("tuning.sled");
    let db = TuningDb::open(&db_path).unwrap();

    // Trial 1 is the default schedule (clean); then one fault of each kind in a row, then
    // clean trials again.
    let mut plan = FaultPlan::new();
    for (i, fault) in Fault::ALL.into_iter().enumerate() {
        plan = plan.with(2 + i, fault);
    }
    let last_fault = 1 + Fault::ALL.len();
    let trials = last_fault + CLEAN_AFTER;
    // The text form the CLI will take gives the same plan.
    assert_eq!(FaultPlan::parse(&plan.to_string()).unwrap(), plan);
    let options = TuneOptions {
        strategy: Strategy::Random,
        trials,
        time: Duration::from_secs(3600),
        seed: 11,
        measure: MeasureOptions {
            runs: 3,
            max_timed: Duration::from_millis(200),
            validate: true,
            faults: plan.clone(),
            ..MeasureOptions::default()
        },
        // The calibration runs before the first trial and must not disturb the plan.
        calibrate_warmup: true,
    };
    let workloads = [ModelWorkload {
        workload: workload(),
        labels: vec!["test.gemm".into()],
    }];

    let caps = rocky_runtime::device_caps(ctx.info(), ctx.caps());
    let mut tuner = Tuner::new(ctx, selector(), &db);
    let key = tuner.key(&workload());
    let mut seen: Vec<(usize, Trial)> = Vec::new();
    let start = Instant::now();
    let reports = tuner
        .tune(&workloads, &options, &mut |p| {
            if let Progress::Trial { number, trial, .. } = p {
                seen.push((number, trial.clone()));
            }
        })
        .expect("the tuning run survives every injected failure");
    eprintln!(
        "tuning {trials} trials took {:.1} s",
        start.elapsed().as_secs_f64()
    );

    // Every trial was measured, numbered 1.., the failures being exactly the injected ones.
    assert_eq!(
        seen.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        (1..=trials).collect::<Vec<_>>()
    );
    assert_eq!(seen[0].1.schedule, default_schedule(&workload(), &caps));
    for (number, trial) in &seen {
        eprintln!("trial {number}: {:?}", trial.status);
        match (plan.at(*number), failure(trial)) {
            (None, None) => {}
            (None, Some((kind, message))) => {
                panic!("trial {number} was not injected but failed ({kind:?}): {message}")
            }
            (Some(fault), None) => panic!("trial {number}: the injected {fault} did not fail it"),
            (Some(fault), Some((kind, message))) => {
                assert_eq!(kind, fault.kind(), "trial {number}: {message}");
                assert!(message.starts_with(INJECTED), "trial {number}: {message}");
                // Each failure came from its real stage and went through the real classifier.
                let from_stage = match fault {
                    Fault::SpirvVal => "rejected the module",
                    Fault::PipelineCreation => "creating the pipeline of kernel",
                    Fault::OutOfMemory => "at vkEndCommandBuffer",
                    Fault::DeviceLost => "the Vulkan device was lost",
                    Fault::Timeout => "timed out after",
                    Fault::Mismatch => "reference",
                };
                assert!(message.contains(from_stage), "trial {number}: {message}");
            }
        }
    }
    // The lost device was really replaced, and the trials after it ran on the new one.
    assert_eq!(tuner.contexts_opened(), 2);
    assert!(seen[last_fault..].iter().all(|(_, t)| t.is_ok()));

    let report = &reports[0];
    assert_eq!(report.measured, trials);
    assert_eq!(report.failed, Fault::ALL.len());
    // The best is the fastest Ok trial, never a failed (mismatching) one.
    let best = report.best.as_ref().expect("a best trial");
    assert!(best.is_ok(), "{best:?}");
    let fastest = seen
        .iter()
        .filter(|(_, t)| t.is_ok())
        .map(|(_, t)| t.median_s)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(best.median_s, fastest);
    for (_, t) in seen.iter().filter(|(_, t)| !t.is_ok()) {
        assert_ne!(t.schedule, best.schedule, "a failed schedule won: {t:?}");
    }

    // Reopened, the database holds every trial, failures with their kinds included.
    drop(tuner);
    drop(db);
    let db = TuningDb::open(&db_path).unwrap();
    let stored = db.trials(&key).unwrap();
    assert_eq!(stored.len(), trials);
    for (number, trial) in &seen {
        assert!(
            stored.contains(trial),
            "trial {number} is missing from the reopened database: {trial:?}"
        );
    }
    assert_eq!(db.best(&key).unwrap().as_ref(), Some(best));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_spirv_val_stage_accepts_kernels_and_rejects_a_truncated_one() {
    require_spirv_val();
    let exe = spirv_val_path().unwrap();
    let caps = DeviceCaps {
        spirv_version: (1, 5),
        ..DeviceCaps::desktop_all_features()
    };
    let kernel = instantiate(&workload(), &default_schedule(&workload(), &caps), &caps).unwrap();
    let version = kernel.meta.spirv_version;
    validate(exe, &kernel.spirv, version).expect("a compiled kernel validates");
    let cut = drop_last_instruction(&kernel.spirv).unwrap();
    assert_eq!(
        cut.len() + 1,
        kernel.spirv.len(),
        "OpFunctionEnd is one word"
    );
    match validate(exe, &cut, version) {
        Err(ValidationError::Rejected { env, message }) => {
            assert_eq!(env, "vulkan1.2");
            assert!(!message.is_empty());
        }
        other => panic!("the truncated module was not rejected: {other:?}"),
    }
}
