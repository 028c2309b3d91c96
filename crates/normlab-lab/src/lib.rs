//! # normlab-lab
//!
//! normlab's study, built on the [`normlab`] library: the experiments that
//! check the lessons' claims ([`exp`]: one file each, a framework file and
//! a registry), grids of runs ([`sweep`]: ids, parallel, resumable,
//! shards, cluster scripts), the findings book ([`book`]: planning,
//! estimate, cluster tasks, findings; it runs the experiments), tables and
//! figures ([`present`]), reports from runs folders ([`report`]) and the
//! benchmarks ([`bench`]). The library never imports this crate; the
//! `normlab` binary sits on top of both.
//!
//! Data flows one way: kernels -> nn -> model -> train (the library) ->
//! sweep -> exp -> cli/web.

pub mod bench;
pub mod book;
pub mod exp;
pub mod present;
pub mod report;
pub mod sweep;
pub mod widgets;
