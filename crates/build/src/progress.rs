//! Progress of a long build, reported through [`Progress`] to whoever shows
//! it: the library draws nothing; `cargo xtask` draws bars (indicatif), a
//! service could log or export the same calls.

use std::sync::atomic::{AtomicU64, Ordering};

/// Receives the progress of a build's long stages ("ripples": one step per
/// copy; "neighbour rows": one step per base vector and pass). Called from
/// the build's worker threads.
pub trait Progress: Sync {
    /// `stage` (re)starts at 0 of `total` steps.
    fn start(&self, stage: &'static str, total: u64);
    /// `steps` more steps of `stage` are done.
    fn advance(&self, stage: &'static str, steps: u64);
    /// `stage` is over.
    fn finish(&self, stage: &'static str);
}

/// Reports nothing (what [`crate::build`] uses).
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &'static str, _: u64) {}
    fn advance(&self, _: &'static str, _: u64) {}
    fn finish(&self, _: &'static str) {}
}

/// One stage's counter, handed to the build's phases: they count steps and
/// the counter forwards them to the [`Progress`].
pub struct Stage<'a> {
    progress: &'a dyn Progress,
    name: &'static str,
    total: AtomicU64,
    position: AtomicU64,
}

impl<'a> Stage<'a> {
    /// `name` starts with `total` steps.
    pub fn new(progress: &'a dyn Progress, name: &'static str, total: u64) -> Self {
        progress.start(name, total);
        Self {
            progress,
            name,
            total: AtomicU64::new(total),
            position: AtomicU64::new(0),
        }
    }

    /// A stage that reports nothing (for callers of the phases outside a build).
    pub fn hidden() -> Stage<'static> {
        Stage::new(&NoProgress, "", 0)
    }

    /// `steps` more steps done.
    pub fn inc(&self, steps: u64) {
        self.position.fetch_add(steps, Ordering::Relaxed);
        self.progress.advance(self.name, steps);
    }

    /// Steps done so far.
    pub fn position(&self) -> u64 {
        self.position.load(Ordering::Relaxed)
    }

    /// The stage restarts with `total` steps, `done` of them already done
    /// (a pass that is redone elsewhere goes back to where it began).
    pub fn restart(&self, total: u64, done: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.position.store(done, Ordering::Relaxed);
        self.progress.start(self.name, total);
        self.progress.advance(self.name, done);
    }

    /// The stage's total steps.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The stage is over.
    pub fn finish(&self) {
        self.progress.finish(self.name);
    }
}
