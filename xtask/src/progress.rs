//! The build's progress ([`octex_build::Progress`]) drawn as indicatif bars,
//! one per stage, on a terminal.

use std::collections::HashMap;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

/// Bars for the stages a build reports.
#[derive(Default)]
pub struct Bars {
    bars: Mutex<HashMap<&'static str, ProgressBar>>,
}

impl Bars {
    fn with(&self, stage: &'static str, f: impl FnOnce(&ProgressBar)) {
        let mut bars = self.bars.lock().unwrap_or_else(|e| e.into_inner());
        let bar = bars.entry(stage).or_insert_with(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template(
                    "{msg:>14} [{elapsed_precise}] {wide_bar} {pos}/{len} ({eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_message(stage);
            b
        });
        f(bar);
    }
}

impl octex_build::Progress for Bars {
    fn start(&self, stage: &'static str, total: u64) {
        self.with(stage, |b| {
            b.set_length(total);
            b.set_position(0);
        });
    }

    fn advance(&self, stage: &'static str, steps: u64) {
        self.with(stage, |b| b.inc(steps));
    }

    fn finish(&self, stage: &'static str) {
        let mut bars = self.bars.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = bars.remove(stage) {
            b.finish_and_clear();
        }
    }
}
