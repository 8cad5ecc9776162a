//! Seed rankings (`rocky tune --static`): stored apart from the trials, never a winner, carried
//! by export and import, found for the same GPU under another driver version.

mod common;

use common::*;
use rocky_tuning_db::{
    export_jsonl, import_jsonl, ExportFilter, Lookup, RankedSchedule, SeedRanking, TuningDb,
};

fn ranking(date: u64, order: &[u32]) -> SeedRanking {
    SeedRanking {
        source: "analytic: test".into(),
        date,
        host: "shim-host".into(),
        candidates: order
            .iter()
            .enumerate()
            .map(|(rank, &i)| RankedSchedule {
                schedule: schedule(i),
                score: 10.0 * (rank as f64 + 1.0),
                disqualified: None,
                driver_stats: None,
            })
            .collect(),
    }
}

#[test]
fn a_ranking_is_never_a_best_trial_and_is_found_for_the_same_gpu_on_another_driver() {
    let dir = Scratch::new("seeds-not-best");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let shim = key(gpu("25.0.7"), workload(64, 896));
    db.set_seed_ranking(&shim, &ranking(100, &[3, 1, 2]))
        .unwrap();
    assert_eq!(db.best(&shim).unwrap(), None);
    assert!(db.trials(&shim).unwrap().is_empty());
    assert_eq!(db.stats().unwrap().trials, 0);
    let board = gpu("26.1.6");
    assert_eq!(
        db.lookup_for_device(&board, &shim.compiler_version, &shim.workload)
            .unwrap(),
        Lookup::None
    );
    let found = db
        .seed_ranking_for_gpu(&board, &shim.compiler_version, &shim.workload)
        .unwrap()
        .expect("the shim's ranking serves the board");
    assert_eq!(found.top(2), vec![schedule(3), schedule(1)]);
    // Another GPU, another compiler version or another workload: nothing.
    assert!(db
        .seed_ranking_for_gpu(&lavapipe(), &shim.compiler_version, &shim.workload)
        .unwrap()
        .is_none());
    assert!(db
        .seed_ranking_for_gpu(&board, "other", &shim.workload)
        .unwrap()
        .is_none());
    assert!(db
        .seed_ranking_for_gpu(&board, &shim.compiler_version, &workload(64, 4864))
        .unwrap()
        .is_none());
}

#[test]
fn rankings_out_of_order_or_without_a_source_are_refused() {
    let dir = Scratch::new("seeds-invalid");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let k = key(gpu("25.0.7"), workload(64, 896));
    let mut bad = ranking(1, &[1, 2]);
    bad.candidates.swap(0, 1);
    let e = db.set_seed_ranking(&k, &bad).unwrap_err().to_string();
    assert!(e.contains("not ranked best first"), "{e}");
    let mut bad = ranking(1, &[1, 2]);
    bad.source = " ".into();
    assert!(db.set_seed_ranking(&k, &bad).is_err());
    // A disqualified candidate goes last; a qualified one after it is refused.
    let mut bad = ranking(1, &[1, 2]);
    bad.candidates[0].disqualified = Some("spills: Spills 3".into());
    let e = db.set_seed_ranking(&k, &bad).unwrap_err().to_string();
    assert!(e.contains("follows a disqualified"), "{e}");
    assert!(db.seed_rankings(None).unwrap().is_empty());
}

#[test]
fn rankings_travel_with_export_and_import_and_the_newer_one_wins() {
    let dir = Scratch::new("seeds-exchange");
    let src = TuningDb::open(dir.join("src")).unwrap();
    let k = key(gpu("25.0.7"), workload(64, 896));
    let mut r = ranking(200, &[2, 0, 1]);
    r.candidates[2].disqualified = Some("spills: Spills 5".into());
    r.candidates[2].driver_stats = Some([("Spills".to_string(), 5.0)].into());
    src.set_seed_ranking(&k, &r).unwrap();
    let mut out = Vec::new();
    let summary = export_jsonl(&src, &mut out, &ExportFilter::default()).unwrap();
    assert_eq!((summary.records, summary.seed_rankings), (0, 1));
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\"rocky-seed-ranking\""), "{text}");

    let dst = TuningDb::open(dir.join("dst")).unwrap();
    dst.set_seed_ranking(&k, &ranking(100, &[1])).unwrap();
    let s = import_jsonl(&dst, text.as_bytes(), "pre-tuned.jsonl").unwrap();
    assert_eq!((s.seed_rankings_added, s.seed_rankings_kept_local), (1, 0));
    assert_eq!(dst.seed_ranking(&k).unwrap(), Some(r.clone()));
    assert_eq!(
        dst.best(&k).unwrap(),
        None,
        "an import of seeds adds no winner"
    );
    // An older ranking does not replace a newer one.
    dst.set_seed_ranking(&k, &ranking(300, &[1])).unwrap();
    let s = import_jsonl(&dst, text.as_bytes(), "pre-tuned.jsonl").unwrap();
    assert_eq!((s.seed_rankings_added, s.seed_rankings_kept_local), (0, 1));
    assert_eq!(dst.seed_ranking(&k).unwrap().unwrap().date, 300);
    // A bad ranking line fails the import with its line number.
    let bad = text.replace("\"score\":10.0", "\"score\":-1.0");
    let e = import_jsonl(&dst, bad.as_bytes(), "bad.jsonl")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 1") && e.contains("score"), "{e}");
}
