//! `normlab book`: every experiment at its full setting (or `--quick`), its
//! runs trained through the sweep engine (so an interrupted book resumes:
//! finished runs are reused), then `findings.md`: one section per claim of
//! the lesson (C1-C27) with its statement, normlab's setting, the figure,
//! and the verdicts the experiments computed, and `findings.json` with the
//! same verdicts for machines (and for the test that quick settings agree
//! with the full ones).
//!
//! The book sits beside the experiments (`exp`), which it runs and never
//! the other way round. Files: `run.rs` (planning and running the
//! chapters, publishing), `estimate.rs` (the cost model and the time
//! estimate calibrated on this machine), `findings.rs` (the findings page
//! and its JSON), `departures.rs` (where normlab's settings depart from
//! the lesson's, and why), `view.rs` (a published book as the web lab
//! reads it), `cluster.rs` (the book split into cluster tasks and
//! assembled) and `emit.rs` (the Slurm and Kubernetes scripts).

pub mod cluster;
pub mod departures;
pub mod emit;
pub mod estimate;
pub mod findings;
pub mod run;
pub mod view;

pub use estimate::GFLOPS_PER_CORE;
pub use findings::{findings, recorded, Finding, Recorded};
pub use run::{
    estimate, has_findings, publish, rewrite_findings, run, uncovered_claims, Book, BookOptions,
    BookProgress, PlanRow,
};
