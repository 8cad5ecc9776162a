//! A tuning run killed with SIGKILL keeps every trial it reported as flushed.
//!
//! The parent test spawns this same test binary running the ignored `writer_child` test with
//! `ROCKY_TDB_WRITER_DB` set; the child adds trials in a loop and prints `flushed N` after
//! each `add_trial` returns. The parent kills it mid-loop, then reopens the database.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use rocky_tuning_db::{DbError, TuningDb};

const ENV: &str = "ROCKY_TDB_WRITER_DB";
const KILL_AFTER: usize = 25;

fn writer_key() -> rocky_tuning_db::RecordKey {
    key(gpu("24.2.1"), workload(512, 896))
}

#[test]
#[ignore = "helper: run as a child process by killed_writer_keeps_every_flushed_trial"]
fn writer_child() {
    let path = std::env::var(ENV).expect("run by the parent test only");
    let db = TuningDb::open(path).unwrap();
    for i in 0..1_000_000u32 {
        db.add_trial(&writer_key(), &ok_trial(i, 1e-4 + f64::from(i) * 1e-7))
            .unwrap();
        println!("flushed {}", i + 1);
    }
}

#[test]
fn killed_writer_keeps_every_flushed_trial() {
    let dir = Scratch::new("kill");
    let db_path = dir.join("db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV, &db_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut reported = 0usize;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("flushed ") {
            reported = n.trim().parse().unwrap();
            if reported >= KILL_AFTER {
                break;
            }
        }
    }
    assert!(
        reported >= KILL_AFTER,
        "the writer stopped early after {reported} trials"
    );

    // While the writer lives it holds sled's lock: a second process gets a clear error.
    let err = TuningDb::open(&db_path)
        .err()
        .expect("the db is locked by the writer");
    assert!(matches!(err, DbError::Locked { .. }), "{err}");

    child.kill().unwrap(); // SIGKILL on unix: no destructors, no final flush.
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was killed, not finished");

    let db = TuningDb::open(&db_path).unwrap();
    let trials = db.trials(&writer_key()).unwrap();
    assert!(
        trials.len() >= reported,
        "{} trials stored, {reported} reported flushed",
        trials.len()
    );
    // The stored trials are exactly the writer's sequence, in order, none damaged.
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(*t, ok_trial(i as u32, 1e-4 + i as f64 * 1e-7), "trial {i}");
    }
    assert_eq!(db.best(&writer_key()).unwrap(), Some(ok_trial(0, 1e-4)));
    assert_eq!(db.stats().unwrap().trials, trials.len());
}
