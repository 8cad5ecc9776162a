//! The constraint's second thread: while the device computes a decode step, the constraint
//! accepts the token drawn before it and prepares its next mask (which needs the tokens so far,
//! not the logits). One thread for the whole generation, handed the constraint at each step
//! and handing it back: spawning a thread per token cost an OS thread's creation and teardown
//! on every step's critical path.

use crate::steer::Constraint;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::Scope;

/// The constraint on its way to or from the preparing thread, with what that thread made of
/// it.
struct Job<'a> {
    constraint: &'a mut dyn Constraint,
    accept: Option<u32>,
    result: Result<(), String>,
}

/// A thread, scoped to the generation, that runs `accept` then `prepare` on the constraint it
/// is handed.
pub(crate) struct Preparer<'a> {
    work: Sender<Job<'a>>,
    done: Receiver<Job<'a>>,
}

impl<'a> Preparer<'a> {
    /// Starts the thread in `scope`; it ends when the preparer is dropped.
    pub(crate) fn start<'scope, 'env>(scope: &'scope Scope<'scope, 'env>) -> Preparer<'a>
    where
        'a: 'scope,
    {
        let (work, jobs) = channel::<Job<'a>>();
        let (finished, done) = channel::<Job<'a>>();
        scope.spawn(move || {
            for mut job in jobs {
                job.result = match job.accept {
                    Some(t) => job.constraint.accept(t),
                    None => Ok(()),
                }
                .and_then(|()| job.constraint.prepare());
                if finished.send(job).is_err() {
                    break;
                }
            }
        });
        Preparer { work, done }
    }

    /// Hands `constraint` to the thread: it accepts `accept` (if any) and prepares the next
    /// mask. [`Preparer::take_back`] returns it.
    pub(crate) fn hand_over(&self, constraint: &'a mut dyn Constraint, accept: Option<u32>) {
        let job = Job {
            constraint,
            accept,
            result: Ok(()),
        };
        // The thread lives as long as `self` unless it panicked; then `take_back` says so.
        let _ = self.work.send(job);
    }

    /// Waits for the constraint handed over last and returns it with the result of its
    /// `accept` and `prepare`; `Err` where the thread panicked (the constraint is lost).
    pub(crate) fn take_back(&self) -> Result<(&'a mut dyn Constraint, Result<(), String>), String> {
        self.done
            .recv()
            .map(|job| (job.constraint, job.result))
            .map_err(|_| "the constraint's mask panicked".to_string())
    }
}
